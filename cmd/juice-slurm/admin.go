package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

// The admin commands read the same tables the controller writes.

// storeOpts are the settings of the commands that read the database.
type storeOpts struct {
	dbURL, cluster *string
}

func storeFlags(fs *flag.FlagSet) *storeOpts {
	return &storeOpts{
		dbURL:   fs.String("database-url", "", "PostgreSQL URL (required)"),
		cluster: fs.String("cluster", "", "Slurm's ClusterName (required)"),
	}
}

type statusOpts struct {
	*storeOpts
	all *bool
}

func statusFlags(fs *flag.FlagSet) *statusOpts {
	return &statusOpts{storeOpts: storeFlags(fs), all: fs.Bool("all", false, "also list every open run")}
}

func jobFlags(fs *flag.FlagSet) *storeOpts { return storeFlags(fs) }

func openStore(ctx context.Context, fs *flag.FlagSet, o *storeOpts, args []string) (*store.Store, string, func(), error) {
	dbURL, cluster := o.dbURL, o.cluster
	if err := parseFlags(fs, args); err != nil {
		return nil, "", nil, err
	}
	if *dbURL == "" || *cluster == "" {
		return nil, "", nil, usageError{fmt.Errorf("%s: --database-url and --cluster are required (in %s, or JUICE_DATABASE_URL and JUICE_CLUSTER)", fs.Name(), DefaultConfig)}
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return nil, "", nil, fmt.Errorf("database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, "", nil, fmt.Errorf("database: %w", err)
	}
	return store.New(pool, *cluster), *cluster, pool.Close, nil
}

func runStatus(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("juice-slurm status", flag.ContinueOnError)
	o := statusFlags(fs)
	all := o.all
	st, cluster, closeFn, err := openStore(ctx, fs, o.storeOpts, args)
	if err != nil {
		return err
	}
	defer closeFn()
	counts, err := st.Summary(ctx)
	if err != nil {
		return err
	}
	holder, until, err := st.LeaseHolder(ctx, "reconciler/"+cluster)
	if err != nil {
		return err
	}
	if holder == "" {
		fmt.Println("leader: none (no controller is reconciling)")
	} else {
		fmt.Printf("leader: %s (lease until %s)\n", holder, until.Local().Format(time.TimeOnly))
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprint(w, "POOL")
	for _, s := range reconcile.States {
		fmt.Fprintf(w, "\t%s", strings.ToUpper(string(s)))
	}
	fmt.Fprintln(w)
	pools := map[string]map[reconcile.State]int{}
	var order []string
	for _, c := range counts {
		if pools[c.Pool] == nil {
			pools[c.Pool] = map[reconcile.State]int{}
			order = append(order, c.Pool)
		}
		pools[c.Pool][c.State] = c.N
	}
	for _, p := range order {
		fmt.Fprint(w, p)
		for _, s := range reconcile.States {
			fmt.Fprintf(w, "\t%d", pools[p][s])
		}
		fmt.Fprintln(w)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	open, err := st.Open(ctx)
	if err != nil || (!*all && len(open) > 20) {
		if err == nil {
			fmt.Printf("%d open runs (--all lists them)\n", len(open))
		}
		return err
	}
	if len(open) > 0 {
		fmt.Println()
		w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "JOB\tRUN\tUSER\tREQUEST\tSTATE\tJOB STATE\tAGE\tREASON")
		for _, r := range open {
			fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Run.JobID, r.Run.Run, r.UserName, r.Request.Describe(),
				r.Status.State, r.Spec.JobState, time.Since(r.CreatedAt).Round(time.Second), r.Status.Reason)
		}
		return w.Flush()
	}
	return nil
}

func runJobCommand(ctx context.Context, cmd, jobArg string, args []string) error {
	job, err := strconv.ParseUint(jobArg, 10, 32)
	if err != nil {
		return usageError{fmt.Errorf("%s job %q: not a job id", cmd, jobArg)}
	}
	fs := flag.NewFlagSet("juice-slurm "+cmd+" job", flag.ContinueOnError)
	st, cluster, closeFn, err := openStore(ctx, fs, jobFlags(fs), args)
	if err != nil {
		return err
	}
	defer closeFn()
	rs, err := st.ForJob(ctx, uint32(job))
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		return notFoundError{fmt.Errorf("job %d of cluster %s has no Juice reservation", job, cluster)}
	}
	if cmd == "release" {
		released := 0
		for i := range rs {
			if rs[i].Status.State.Final() {
				continue
			}
			// Recorded as what an administrator wants; the controller's reconciler does the release.
			if _, err := st.Unwant(ctx, rs[i].ID, "released by an administrator (juice-slurm release)", true); err != nil {
				return err
			}
			released++
			fmt.Printf("job %d run %d: %s; the controller cancels its session\n", job, rs[i].Run.Run, rs[i].Status.State)
		}
		if released == 0 {
			fmt.Printf("job %d: nothing to release (every reservation is final)\n", job)
		}
		return nil
	}
	for i, r := range rs {
		if i > 0 {
			fmt.Println()
		}
		fmt.Printf("Job:          %d (cluster %s)\n", r.Run.JobID, r.Run.Cluster)
		fmt.Printf("Run:          %d\n", r.Run.Run)
		fmt.Printf("Reservation:  %s\n", r.ID)
		fmt.Printf("User:         %s\n", r.UserName)
		fmt.Printf("Partition:    %s\n", r.Partition)
		fmt.Printf("Request:      %s (%s)\n", r.Request.Describe(), r.Request)
		fmt.Printf("State:        %s\n", r.Status.State)
		fmt.Printf("Reason:       %s\n", r.Status.Reason)
		if r.Status.FailReason != "" {
			fmt.Printf("Failure:      %s\n", r.Status.FailReason)
		}
		if r.Spec.Wanted {
			fmt.Printf("Wanted:       yes\n")
		} else {
			fmt.Printf("Wanted:       no: %s\n", r.Spec.WantReason)
		}
		fmt.Printf("Job state:    %s\n", strings.TrimSpace(r.Spec.JobState+" "+r.Spec.JobReason))
		if r.Status.SessionID != "" {
			fmt.Printf("Session:      %s on %s\n", r.Status.SessionID, r.Status.AgentAddress)
		}
		fmt.Printf("Created:      %s\n", r.CreatedAt.Local().Format(time.DateTime))
		if !r.Status.ReadyAt.IsZero() {
			fmt.Printf("Ready after:  %s\n", r.Status.ReadyAt.Sub(r.CreatedAt).Round(time.Millisecond))
		}
		evs, err := st.Events(ctx, r.ID)
		if err != nil {
			return err
		}
		fmt.Println("Events:")
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "  TIME\tFROM\tTO\tEVENT\tREASON")
		for _, e := range evs {
			from := string(e.From)
			if from == "" {
				from = "-"
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", e.At.Local().Format("15:04:05.000"), from, e.To, e.Event, e.Reason)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}
