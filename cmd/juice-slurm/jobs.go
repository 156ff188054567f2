package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
)

type jobsOpts struct {
	url, caFile, munge *string
	events             *bool
}

func jobsFlags(fs *flag.FlagSet) *jobsOpts {
	return &jobsOpts{
		url:    fs.String("hook-url", "https://127.0.0.1:7171", "the controller's hook API (https://; a comma-separated list of replicas: the first is asked)"),
		caFile: fs.String("hook-ca", "/etc/juice-slurm/hook.crt", "the certificate the hook API must prove itself with (or its CA)"),
		munge:  fs.String("munge", "/usr/bin/munge", "munge, which makes the credential that proves who you are"),
		events: fs.Bool("events", false, "print each run's transitions too"),
	}
}

// runJobs prints the caller's own Juice runs, their states and (with --events) their histories: for users, who
// have neither the database's credentials nor the hook secret. The caller proves who they are with a MUNGE
// credential, and the controller answers only that user's runs.
func runJobs(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("juice-slurm jobs", flag.ContinueOnError)
	o := jobsFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tlsConf, err := hookapi.ClientTLS(*o.caFile)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cred, err := exec.CommandContext(cctx, *o.munge, "-n").Output()
	if err != nil {
		return fmt.Errorf("make a MUNGE credential with %s -n: %w", *o.munge, err)
	}
	c := &hookapi.Client{URL: *o.url, TLS: tlsConf}
	rep, err := c.Mine(ctx, string(cred))
	if err != nil {
		return err
	}
	if len(rep.Runs) == 0 {
		fmt.Fprintf(out, "no Juice jobs of %s\n", rep.User)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tRUN\tREQUEST\tSTATE\tJOB STATE\tCREATED\tREASON")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.JobID, r.Run, r.Request, r.State, r.JobState,
			r.Created.Local().Format("01-02 15:04:05"), oneLine(r.Reason))
		if *o.events {
			for _, e := range r.Events {
				from := e.From
				if from == "" {
					from = "-"
				}
				fmt.Fprintf(tw, "\t\t  %s\t%s -> %s\t%s\t\t%s\n", e.At.Local().Format("15:04:05.000"), from, e.To, e.Event, oneLine(e.Reason))
			}
		}
	}
	return tw.Flush()
}

// oneLine keeps a reason on one line of printable text.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
