package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/internal/settings"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

type jobsOpts struct {
	url, caFile, munge      *string
	user, partition, states string
	events, json, noheader  *bool
}

func jobsFlags(fs *flag.FlagSet) *jobsOpts {
	o := &jobsOpts{
		url:      fs.String("hook-url", "https://127.0.0.1:7171", "the controller's hook API (https://; a comma-separated list of replicas: the first is asked)"),
		caFile:   fs.String("hook-ca", "/etc/juice-slurm/hook.crt", "the certificate the hook API must prove itself with (or its CA)"),
		munge:    fs.String("munge", "/usr/bin/munge", "munge, which makes the credential that proves who you are"),
		events:   fs.Bool("events", false, "print each run's transitions too"),
		json:     fs.Bool("json", false, "print JSON (the hook API's answer, filtered; times in RFC 3339) instead of a table"),
		noheader: fs.Bool("noheader", false, "print no header line (as squeue --noheader)"),
	}
	// squeue's short and long names.
	for _, n := range []string{"u", "user"} {
		fs.StringVar(&o.user, n, "", "only if USER is you: juice-slurm jobs shows your own runs only (as squeue -u)")
	}
	for _, n := range []string{"p", "partition"} {
		fs.StringVar(&o.partition, n, "", "only runs of these partitions, comma-separated (as squeue -p)")
	}
	for _, n := range []string{"t", "states"} {
		fs.StringVar(&o.states, n, "", "only runs in these states, comma-separated: the job's Slurm state (PENDING or PD, RUNNING or R, ...) or the run's Juice state (pending, waiting, ready, failed, ...), any case (as squeue -t)")
	}
	return o
}

// squeueStates are squeue's short state names, and the Slurm state each stands for.
var squeueStates = map[string]string{"PD": "PENDING", "R": "RUNNING", "CG": "COMPLETING", "CD": "COMPLETED", "CA": "CANCELLED",
	"F": "FAILED", "TO": "TIMEOUT", "NF": "NODE_FAIL", "PR": "PREEMPTED", "OOM": "OUT_OF_MEMORY", "S": "SUSPENDED",
	"BF": "BOOT_FAIL", "DL": "DEADLINE", "RQ": "REQUEUED", "RH": "REQUEUE_HOLD", "RF": "REQUEUE_FED", "RS": "RESIZING",
	"RV": "REVOKED", "SE": "SPECIAL_EXIT", "SI": "SIGNALING", "SO": "STAGE_OUT", "ST": "STOPPED", "CF": "CONFIGURING"}

// keep says whether a run passes the -p and -t filters.
func (o *jobsOpts) keep(r hookapi.RunView) bool {
	if o.partition != "" && !anyOf(o.partition, func(p string) bool { return p == r.Partition }) {
		return false
	}
	if o.states != "" && !anyOf(o.states, func(s string) bool {
		s = strings.ToUpper(s)
		if long, ok := squeueStates[s]; ok {
			s = long
		}
		// A Slurm state may carry flags after it ("PENDING+REQUEUED" in some releases' answers).
		jobState, _, _ := strings.Cut(strings.ToUpper(r.JobState), "+")
		return s == jobState || strings.EqualFold(s, r.State)
	}) {
		return false
	}
	return true
}

// anyOf says whether match holds for one of list's comma-separated items.
func anyOf(list string, match func(string) bool) bool {
	for _, item := range strings.Split(list, ",") {
		if item = strings.TrimSpace(item); item != "" && match(item) {
			return true
		}
	}
	return false
}

// runJobs prints the caller's own Juice runs, their states and (with --events) their histories: for users, who
// have neither the database's credentials nor the hook secret. The caller proves who they are with a MUNGE
// credential, and the controller answers only that user's runs. The settings file is root:slurm 0640: a user who
// may not read it runs with JUICE_HOOK_URL and JUICE_HOOK_CA (which an administrator sets for every login, see
// docs/user.md) or the defaults, and is told so when the hook API cannot be reached.
func runJobs(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("juice-slurm jobs", flag.ContinueOnError)
	o := jobsFlags(fs)
	origins, err := parseUserFlags(fs, args)
	if err != nil {
		return err
	}
	hint := func(err error) error {
		if strings.HasSuffix(origins["config"], settings.Unreadable) {
			return fmt.Errorf("%w (you may not read %s, so hook-url is %s from %s: ask your administrator to set JUICE_HOOK_URL and JUICE_HOOK_CA for users, see docs/user.md)",
				err, configOf(fs), *o.url, origins["hook-url"])
		}
		return err
	}
	tlsConf, err := hookapi.ClientTLS(*o.caFile)
	if err != nil {
		return hint(err)
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
		return hint(err)
	}
	if o.user != "" && o.user != rep.User {
		return errors.New("jobs -u " + o.user + ": juice-slurm jobs shows your own runs only, and you are " + rep.User +
			" (an administrator sees every run with juice-slurm status)")
	}
	runs := rep.Runs[:0:0]
	for _, r := range rep.Runs {
		if o.keep(r) {
			runs = append(runs, r)
		}
	}
	if *o.json {
		if !*o.events {
			for i := range runs {
				runs[i].Events = nil
			}
		}
		return writeJSON(out, hookapi.MineReply{User: rep.User, Runs: append([]hookapi.RunView{}, runs...)})
	}
	if len(runs) == 0 && !*o.noheader {
		fmt.Fprintf(out, "no Juice jobs of %s\n", rep.User)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if !*o.noheader {
		fmt.Fprintln(tw, "JOB\tRUN\tPARTITION\tREQUEST\tSTATE\tJOB STATE\tCREATED\tREASON")
	}
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", runViewName(r), r.Run, r.Partition, requestText(r.Request), r.State, r.JobState,
			r.Created.Local().Format("01-02 15:04:05"), oneLine(r.Reason))
		if *o.events {
			for _, e := range r.Events {
				from := e.From
				if from == "" {
					from = "-"
				}
				fmt.Fprintf(tw, "\t\t\t  %s\t%s -> %s\t%s\t\t%s\n", e.At.Local().Format("15:04:05.000"), from, e.To, e.Event, oneLine(e.Reason))
			}
		}
	}
	return tw.Flush()
}

// runViewName is a run's job as squeue shows it: its id, an array element as ARRAY_TASK (with its own id when
// it has one).
func runViewName(r hookapi.RunView) string {
	switch {
	case r.ArrayTaskID != nil && r.JobID == 0:
		return fmt.Sprintf("%d_%d", r.ArrayJobID, *r.ArrayTaskID)
	case r.ArrayTaskID != nil:
		return fmt.Sprintf("%d (%d_%d)", r.JobID, r.ArrayJobID, *r.ArrayTaskID)
	}
	return fmt.Sprint(r.JobID)
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

// requestText is a run's request for people ("a 1.5GiB slice of 1 GPU from pool test"), or its text as sent
// when it does not parse.
func requestText(text string) string {
	if r, err := request.Parse(text); err == nil {
		return r.Describe()
	}
	return oneLine(text)
}
