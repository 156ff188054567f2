package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/controller/licenses"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

// The admin commands read the same tables the controller writes.

// storeOpts are the settings of the commands that read the database.
type storeOpts struct {
	dbURL, cluster *string
	json           *bool
}

func storeFlags(fs *flag.FlagSet) *storeOpts {
	return &storeOpts{
		dbURL:   fs.String("database-url", "", "PostgreSQL URL (required)"),
		cluster: fs.String("cluster", "", "Slurm's ClusterName (required)"),
		json:    fs.Bool("json", false, "print JSON (times in RFC 3339, UTC) instead of a table"),
	}
}

type statusOpts struct {
	*storeOpts
	all, licenses *bool
	sacctmgr      *string
}

func statusFlags(fs *flag.FlagSet) *statusOpts {
	return &statusOpts{storeOpts: storeFlags(fs), all: fs.Bool("all", false, "also list every open run"),
		licenses: switchFlag(fs, "licenses", "also show each pool's Slurm license count in slurmdbd, on or off (the controller's setting: on when it keeps them)"),
		sacctmgr: fs.String("sacctmgr", "/usr/bin/sacctmgr", "sacctmgr, which reads the licenses (licenses = on)")}
}

func jobFlags(fs *flag.FlagSet) *storeOpts { return storeFlags(fs) }

func openStore(ctx context.Context, fs *flag.FlagSet, o *storeOpts, args []string) (*store.Store, string, func(), error) {
	return openStoreAfter(ctx, fs, o, args, nil)
}

// openStoreAfter is openStore with check, when not nil, run on the parsed flags first: a bad usage is told
// before the database is dialled.
func openStoreAfter(ctx context.Context, fs *flag.FlagSet, o *storeOpts, args []string, check func() error) (*store.Store, string, func(), error) {
	dbURL, cluster := o.dbURL, o.cluster
	if err := parseFlags(fs, args); err != nil {
		return nil, "", nil, err
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, "", nil, usageError{err}
		}
	}
	if *dbURL == "" || *cluster == "" {
		return nil, "", nil, usageError{fmt.Errorf("%s: --database-url and --cluster are required (settings file: %s; or JUICE_DATABASE_URL and JUICE_CLUSTER)",
			strings.Fields(fs.Name())[1], configOf(fs))}
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

func runStatus(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("juice-slurm status", flag.ContinueOnError)
	o := statusFlags(fs)
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
	open, err := st.Open(ctx)
	if err != nil {
		return err
	}
	if *o.json {
		return writeJSON(out, statusJSON(cluster, holder, until, counts, open))
	}
	if holder == "" {
		fmt.Fprintln(out, "leader: none (no controller is reconciling)")
	} else {
		fmt.Fprintf(out, "leader: %s (lease until %s)\n", holder, until.Local().Format(dated))
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprint(w, "POOL")
	for _, s := range reconcile.States {
		fmt.Fprintf(w, "\t%s", strings.ToUpper(string(s)))
	}
	fmt.Fprintln(w)
	pools, order := byPool(counts)
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
	if *o.licenses {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		counts, err := licenses.Counts(lctx, licenses.Exec{Path: *o.sacctmgr}, cluster)
		cancel()
		if err := writeLicenses(out, counts, err); err != nil {
			return err
		}
	}
	if !*o.all && len(open) > 20 {
		fmt.Fprintf(out, "%d open runs (--all lists them)\n", len(open))
		return nil
	}
	if len(open) > 0 {
		fmt.Fprintln(out)
		w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "JOB\tRUN\tUSER\tREQUEST\tSTATE\tJOB STATE\tCREATED\tAGE\tREASON")
		for _, r := range open {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", jobName(r.Run), r.Run.Run, r.UserName, r.Request.Describe(),
				r.Status.State, r.Spec.JobState, r.CreatedAt.Local().Format(time.DateTime),
				time.Since(r.CreatedAt).Round(time.Second), r.Status.Reason)
		}
		return w.Flush()
	}
	return nil
}

// dated is how the tables print a time: with its date, to the millisecond, in local time.
const dated = "2006-01-02 15:04:05.000"

func byPool(counts []store.Count) (map[string]map[reconcile.State]int, []string) {
	pools := map[string]map[reconcile.State]int{}
	var order []string
	for _, c := range counts {
		if pools[c.Pool] == nil {
			pools[c.Pool] = map[reconcile.State]int{}
			order = append(order, c.Pool)
		}
		pools[c.Pool][c.State] = c.N
	}
	return pools, order
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// The JSON of status and describe: a contract for scripts, so its fields are named here and not taken from the
// domain types. Times are RFC 3339 in UTC; absent times are left out.

type statusOut struct {
	Cluster string          `json:"cluster"`
	Leader  *leaderOut      `json:"leader"`
	Pools   []poolOut       `json:"pools"`
	Runs    []reservationJS `json:"runs"`
}

type leaderOut struct {
	Holder     string    `json:"holder"`
	LeaseUntil time.Time `json:"lease_until"`
}

type poolOut struct {
	Pool   string         `json:"pool"`
	States map[string]int `json:"states"`
}

type requestOut struct {
	Pool      string `json:"pool"`
	GPUs      int    `json:"gpus"`
	VRAMBytes uint64 `json:"vram_bytes,omitempty"`
	Text      string `json:"text"`
}

type reservationJS struct {
	ID      string `json:"id"`
	Cluster string `json:"cluster"`
	Job     uint32 `json:"job"`
	// ArrayJobID and ArrayTaskID name an array's element (job is 0 until slurmctld gives the element its own id).
	ArrayJobID   uint32     `json:"array_job_id,omitempty"`
	ArrayTaskID  *uint32    `json:"array_task_id,omitempty"`
	Run          int        `json:"run"`
	User         string     `json:"user"`
	Account      string     `json:"account,omitempty"`
	Partition    string     `json:"partition"`
	Request      requestOut `json:"request"`
	State        string     `json:"state"`
	Reason       string     `json:"reason"`
	FailReason   string     `json:"fail_reason,omitempty"`
	Wanted       bool       `json:"wanted"`
	WantReason   string     `json:"want_reason,omitempty"`
	JobState     string     `json:"job_state"`
	JobReason    string     `json:"job_reason,omitempty"`
	SessionID    string     `json:"session_id,omitempty"`
	AgentAddress string     `json:"agent_address,omitempty"`
	Created      time.Time  `json:"created"`
	Ready        *time.Time `json:"ready,omitempty"`
	Events       []eventOut `json:"events,omitempty"`
}

type eventOut struct {
	At     time.Time `json:"at"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Event  string    `json:"event"`
	Reason string    `json:"reason"`
}

func reservationJSON(r reconcile.Reservation) reservationJS {
	out := reservationJS{ID: r.ID.String(), Cluster: r.Run.Cluster, Job: r.Run.JobID, Run: r.Run.Run, User: r.UserName,
		Account: r.Account, Partition: r.Partition, Request: requestOut{Pool: r.Request.Pool, GPUs: r.Request.GPUs, VRAMBytes: r.Request.VRAM,
			Text: r.Request.String()}, State: string(r.Status.State), Reason: r.Status.Reason, FailReason: r.Status.FailReason,
		Wanted: r.Spec.Wanted, WantReason: r.Spec.WantReason, JobState: r.Spec.JobState, JobReason: r.Spec.JobReason,
		SessionID: r.Status.SessionID, AgentAddress: r.Status.AgentAddress, Created: r.CreatedAt.UTC()}
	if r.Run.Element() {
		task := r.Run.ArrayTaskID
		out.ArrayJobID, out.ArrayTaskID = r.Run.ArrayJobID, &task
	}
	if !r.Status.ReadyAt.IsZero() {
		ready := r.Status.ReadyAt.UTC()
		out.Ready = &ready
	}
	return out
}

func statusJSON(cluster, holder string, until time.Time, counts []store.Count, open []reconcile.Reservation) statusOut {
	out := statusOut{Cluster: cluster, Pools: []poolOut{}, Runs: []reservationJS{}}
	if holder != "" {
		out.Leader = &leaderOut{Holder: holder, LeaseUntil: until.UTC()}
	}
	pools, order := byPool(counts)
	for _, p := range order {
		po := poolOut{Pool: p, States: map[string]int{}}
		for _, s := range reconcile.States {
			po.States[string(s)] = pools[p][s]
		}
		out.Pools = append(out.Pools, po)
	}
	for _, r := range open {
		out.Runs = append(out.Runs, reservationJSON(r))
	}
	return out
}

// writeLicenses prints the pools' license counts in slurmdbd, or why they could not be read (status goes on).
func writeLicenses(out io.Writer, counts map[string]int, err error) error {
	fmt.Fprintln(out)
	if err != nil {
		_, err = fmt.Fprintf(out, "licenses: cannot read them: %v\n", err)
		return err
	}
	if len(counts) == 0 {
		_, err = fmt.Fprintln(out, "licenses: slurmdbd holds no Juice license for this cluster")
		return err
	}
	pools := make([]string, 0, len(counts))
	for p := range counts {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "LICENSE\tCOUNT")
	for _, p := range pools {
		fmt.Fprintf(w, "%s@%s\t%d\n", licenses.Name(p), licenses.Server, counts[p])
	}
	return w.Flush()
}

// parseJobArg reads describe's and release's job: a job id N, or an array's element ARRAY_TASK as squeue shows
// it (40_7); task is -1 for a job id.
func parseJobArg(s string) (job uint32, task int64, err error) {
	id, t, isElement := strings.Cut(s, "_")
	task = -1
	n, err := strconv.ParseUint(id, 10, 32)
	if err == nil && isElement {
		var tn uint64
		tn, err = strconv.ParseUint(t, 10, 32)
		task = int64(tn)
	}
	if err != nil || n == 0 {
		return 0, 0, fmt.Errorf("%q: not a job id (N, or ARRAY_TASK such as 40_7 for an array's element)", s)
	}
	return uint32(n), task, nil
}

func runJobCommand(ctx context.Context, out io.Writer, cmd, jobArg string, args []string) error {
	fs := flag.NewFlagSet("juice-slurm "+cmd+" job N|ARRAY_TASK", flag.ContinueOnError)
	o := jobFlags(fs)
	if jobArg == "" {
		// Only the help was asked for (main).
		return parseFlags(fs, args)
	}
	job, task, err := parseJobArg(jobArg)
	if err != nil {
		return usageError{fmt.Errorf("%s job %w", cmd, err)}
	}
	st, cluster, closeFn, err := openStore(ctx, fs, o, args)
	if err != nil {
		return err
	}
	defer closeFn()
	var rs []reconcile.Reservation
	if task >= 0 {
		// One element of an array: its runs, those bound to a job id of their own and those reserved ahead.
		elems, err := st.ForArray(ctx, job)
		if err != nil {
			return err
		}
		for _, r := range elems {
			if int64(r.Run.ArrayTaskID) == task {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			return notFoundError{fmt.Errorf("array element %s of cluster %s has no Juice reservation", jobArg, cluster)}
		}
	} else if rs, err = st.ForJob(ctx, job); err != nil {
		return err
	}
	if cmd == "describe" && task < 0 {
		// An array's job id also describes its elements, those started as jobs of their own and those reserved
		// ahead that have no job id yet.
		elems, err := st.ForArray(ctx, job)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, r := range rs {
			seen[r.ID.String()] = true
		}
		for _, r := range elems {
			if !seen[r.ID.String()] {
				rs = append(rs, r)
			}
		}
	}
	if len(rs) == 0 {
		return notFoundError{fmt.Errorf("job %d of cluster %s has no Juice reservation", job, cluster)}
	}
	if cmd == "release" {
		type releasedOut struct {
			Job uint32 `json:"job"`
			// ArrayTaskID is the element of array job Job, for `release job ARRAY_TASK`.
			ArrayTaskID *int64 `json:"array_task_id,omitempty"`
			Released    []int  `json:"released_runs"`
		}
		rel := releasedOut{Job: job, Released: []int{}}
		if task >= 0 {
			rel.ArrayTaskID = &task
		}
		released := 0
		for i := range rs {
			if rs[i].Status.State.Final() {
				continue
			}
			// Recorded as what an administrator wants; the controller's reconciler does the release.
			if _, err := st.Unwant(ctx, rs[i].ID, reconcile.AdminReleased, true); err != nil {
				return err
			}
			released++
			rel.Released = append(rel.Released, rs[i].Run.Run)
			if !*o.json {
				fmt.Fprintf(out, "job %s run %d: %s; the controller cancels its session\n", jobArg, rs[i].Run.Run, rs[i].Status.State)
			}
		}
		if *o.json {
			return writeJSON(out, rel)
		}
		if released == 0 {
			fmt.Fprintf(out, "job %s: nothing to release (every reservation is final)\n", jobArg)
		}
		return nil
	}
	if *o.json {
		all := []reservationJS{}
		for _, r := range rs {
			evs, err := st.Events(ctx, r.ID)
			if err != nil {
				return err
			}
			rj := reservationJSON(r)
			for _, e := range evs {
				rj.Events = append(rj.Events, eventOut{At: e.At.UTC(), From: string(e.From), To: string(e.To),
					Event: string(e.Event), Reason: e.Reason})
			}
			all = append(all, rj)
		}
		return writeJSON(out, all)
	}
	for i, r := range rs {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "Job:          %s (cluster %s)\n", jobName(r.Run), r.Run.Cluster)
		fmt.Fprintf(out, "Run:          %d\n", r.Run.Run)
		fmt.Fprintf(out, "Reservation:  %s\n", r.ID)
		fmt.Fprintf(out, "User:         %s\n", r.UserName)
		fmt.Fprintf(out, "Partition:    %s\n", r.Partition)
		fmt.Fprintf(out, "Request:      %s (%s)\n", r.Request.Describe(), r.Request)
		fmt.Fprintf(out, "State:        %s\n", r.Status.State)
		fmt.Fprintf(out, "Reason:       %s\n", r.Status.Reason)
		if r.Status.FailReason != "" {
			fmt.Fprintf(out, "Failure:      %s\n", r.Status.FailReason)
		}
		if r.Spec.Wanted {
			fmt.Fprintf(out, "Wanted:       yes\n")
		} else {
			fmt.Fprintf(out, "Wanted:       no: %s\n", r.Spec.WantReason)
		}
		fmt.Fprintf(out, "Job state:    %s\n", strings.TrimSpace(r.Spec.JobState+" "+r.Spec.JobReason))
		if r.Status.SessionID != "" {
			fmt.Fprintf(out, "Session:      %s on %s\n", r.Status.SessionID, r.Status.AgentAddress)
		}
		fmt.Fprintf(out, "Created:      %s\n", r.CreatedAt.Local().Format(dated))
		if !r.Status.ReadyAt.IsZero() {
			fmt.Fprintf(out, "Ready after:  %s\n", r.Status.ReadyAt.Sub(r.CreatedAt).Round(time.Millisecond))
		}
		evs, err := st.Events(ctx, r.ID)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, "Events:")
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "  TIME\tFROM\tTO\tEVENT\tREASON")
		for _, e := range evs {
			from := string(e.From)
			if from == "" {
				from = "-"
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", e.At.Local().Format(dated), from, e.To, e.Event, e.Reason)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// jobName is how a run's job is shown: its job id, with its array element (array_task) when it is one, or the
// array element alone while slurmctld has not given it a job id.
func jobName(r reconcile.RunID) string {
	switch {
	case r.Unbound():
		return fmt.Sprintf("%d_%d", r.ArrayJobID, r.ArrayTaskID)
	case r.Element():
		return fmt.Sprintf("%d (%d_%d)", r.JobID, r.ArrayJobID, r.ArrayTaskID)
	}
	return fmt.Sprint(r.JobID)
}
