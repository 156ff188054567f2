package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

// reportHelp defines what juice-slurm report counts; docs/admin.md says the same.
const reportHelp = `juice-slurm report --since WHEN [--until WHEN] --by user|account|pool [--format table|csv|json] [flags]

GPU-hours and VRAM-GiB-hours of the cluster's Juice runs, from the database, per user, Slurm account or pool.

A run holds its session from the moment it became ready (the session active and its file sealed) until its
session was let go: the time its reservation became final (released, or failed after the session was
cancelled), or now for a run that still holds one. Only the part of that holding within [since, until) counts.
  GPU-hours       GPUs of the run x hours held.
  VRAM-GiB-hours  a run with a VRAM slice (gpus=1,vram=...): the slice in GiB x hours held; a run of whole GPUs:
                  GPUs x the pool's GPU VRAM (pool.<name>.gpu_vram in the site policy) in GiB x hours held.
                  Whole GPUs of a pool whose GPU VRAM the policy does not give are not counted there: their
                  GPU-hours are shown apart (UNKNOWN-VRAM GPU-HOURS), never guessed.
  CHARGED         what Slurm charged the pool's license juice_<pool>@juice, as sacct and sreport count it: each
                  run Slurm started, its license count (its GPUs; a VRAM slice 1) x hours from the job's start to
                  its end in Slurm, within [since, until). CHARGED RUNS counts those runs. It differs from
                  GPU-hours by the look-ahead (a session is ready before Slurm starts the job) and the release
                  after the job's end; a run whose job Slurm never started is charged nothing.
A run with no account known (reserved before juice-slurm recorded accounts) counts under "(none)". Runs pruned
by the retention (retention, default 30 days after they ended) are no longer counted.

WHEN is a date (2026-12-01, local midnight), a local time (2026-12-01 08:00), RFC 3339, or a duration back from
now (36h, 7d). --until defaults to now.
`

type reportOpts struct {
	*storeOpts
	since, until, by, format, policyFile *string
}

func reportFlags(fs *flag.FlagSet) *reportOpts {
	return &reportOpts{storeOpts: storeFlags(fs),
		since:      fs.String("since", "", "the start of the period: a date, a time, RFC 3339 or a duration back from now (required)"),
		until:      fs.String("until", "", "the end of the period, as --since (default now)"),
		by:         fs.String("by", "", "group by user, account or pool (required)"),
		format:     fs.String("format", "table", "table, csv or json (--json is --format json)"),
		policyFile: fs.String("policy", policy.DefaultPath, "the site policy, for each pool's GPU VRAM (pool.<name>.gpu_vram)"),
	}
}

// parseWhen reads a report's time: a date or a local time, RFC 3339, or a duration (with d for days) before now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseFloat(days, 64); err == nil && n >= 0 {
			return now.Add(-time.Duration(n * 24 * float64(time.Hour))), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q: want a date (2026-12-01), a local time (2026-12-01 08:00), RFC 3339 or a duration (36h, 7d)", s)
}

// A reportRow is one user's, account's or pool's use, over every pool.
type reportRow struct {
	Key               string  `json:"key"`
	Runs              int     `json:"runs"`
	GPUHours          float64 `json:"gpu_hours"`
	VRAMGiBHours      float64 `json:"vram_gib_hours"`
	UnknownVRAMGPUHrs float64 `json:"unknown_vram_gpu_hours"`
	ChargedRuns       int     `json:"charged_runs"`
	ChargedGPUHours   float64 `json:"charged_gpu_hours"`
}

type reportOut struct {
	Cluster string      `json:"cluster"`
	By      string      `json:"by"`
	Since   time.Time   `json:"since"`
	Until   time.Time   `json:"until"`
	Rows    []reportRow `json:"rows"`
	Total   reportRow   `json:"total"`
	// UnknownVRAMPools are the pools whose whole GPUs' VRAM the site policy does not give.
	UnknownVRAMPools []string `json:"unknown_vram_pools"`
}

// summarize turns the store's usage by key and pool into a row per key, and the total: hours from seconds, and
// VRAM-GiB-hours from the slices and, for whole GPUs, the pool's GPU VRAM where the policy gives it.
func summarize(us []store.Usage, limits *policy.Policy) ([]reportRow, reportRow, []string) {
	byKey := map[string]*reportRow{}
	total := reportRow{Key: "total"}
	unknown := map[string]bool{}
	for _, u := range us {
		r := byKey[u.Key]
		if r == nil {
			r = &reportRow{Key: u.Key}
			byKey[u.Key] = r
		}
		vramGiBHours := u.SliceByteSeconds / float64(vram.GiB) / 3600
		var unknownHours float64
		if v := limits.GPUVRAM(u.Pool); v > 0 {
			vramGiBHours += u.WholeGPUSeconds * float64(v) / float64(vram.GiB) / 3600
		} else if u.WholeGPUSeconds > 0 {
			unknownHours = u.WholeGPUSeconds / 3600
			unknown[u.Pool] = true
		}
		for _, row := range []*reportRow{r, &total} {
			row.Runs += u.Runs
			row.ChargedRuns += u.ChargedRuns
			row.ChargedGPUHours += u.ChargedGPUSeconds / 3600
			row.GPUHours += u.GPUSeconds / 3600
			row.VRAMGiBHours += vramGiBHours
			row.UnknownVRAMGPUHrs += unknownHours
		}
	}
	rows := make([]reportRow, 0, len(byKey))
	for _, r := range byKey {
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
	pools := make([]string, 0, len(unknown))
	for p := range unknown {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	return rows, total, pools
}

func runReport(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("juice-slurm report", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), reportHelp, "\nFlags:\n"); fs.PrintDefaults() }
	o := reportFlags(fs)
	// The period is checked with the other arguments, before the database is dialled.
	now := time.Now()
	since, until := time.Time{}, now
	st, cluster, closeFn, err := openStoreAfter(ctx, fs, o.storeOpts, args, func() error {
		if *o.since == "" || *o.by == "" {
			return fmt.Errorf("report: --since and --by are required")
		}
		if *o.by != "user" && *o.by != "account" && *o.by != "pool" {
			return fmt.Errorf("report: --by %q: want user, account or pool", *o.by)
		}
		if *o.json {
			*o.format = "json"
		}
		if *o.format != "table" && *o.format != "csv" && *o.format != "json" {
			return fmt.Errorf("report: --format %q: want table, csv or json", *o.format)
		}
		var err error
		if since, err = parseWhen(*o.since, now); err != nil {
			return fmt.Errorf("report: --since %w", err)
		}
		if *o.until != "" {
			if until, err = parseWhen(*o.until, now); err != nil {
				return fmt.Errorf("report: --until %w", err)
			}
		}
		if !since.Before(until) {
			return fmt.Errorf("report: --since %s is not before --until %s", since.Format(time.RFC3339), until.Format(time.RFC3339))
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer closeFn()
	limits, err := policy.LoadOptional(*o.policyFile)
	if err != nil {
		return err
	}
	us, err := st.Usage(ctx, store.UsageBy(*o.by), since, until)
	if err != nil {
		return err
	}
	rows, total, unknown := summarize(us, limits)
	switch *o.format {
	case "json":
		return writeJSON(out, reportOut{Cluster: cluster, By: *o.by, Since: since.UTC(), Until: until.UTC(), Rows: rows,
			Total: total, UnknownVRAMPools: unknown})
	case "csv":
		w := csv.NewWriter(out)
		w.Write([]string{*o.by, "runs", "gpu_hours", "vram_gib_hours", "unknown_vram_gpu_hours", "charged_runs", "charged_gpu_hours"})
		for _, r := range rows {
			w.Write([]string{r.Key, strconv.Itoa(r.Runs), hours(r.GPUHours, 4), hours(r.VRAMGiBHours, 4), hours(r.UnknownVRAMGPUHrs, 4),
				strconv.Itoa(r.ChargedRuns), hours(r.ChargedGPUHours, 4)})
		}
		w.Flush()
		return w.Error()
	}
	fmt.Fprintf(out, "cluster %s, %s to %s\n", cluster, since.Local().Format(dated), until.Local().Format(dated))
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "%s\tRUNS\tGPU-HOURS\tVRAM-GIB-HOURS\tUNKNOWN-VRAM GPU-HOURS\tCHARGED RUNS\tCHARGED GPU-HOURS\t\n", strings.ToUpper(*o.by))
	for _, r := range append(rows, total) {
		key := r.Key
		if key == "" {
			key = "(none)"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t\n", key, r.Runs, hours(r.GPUHours, 2), hours(r.VRAMGiBHours, 2),
			hours(r.UnknownVRAMGPUHrs, 2), r.ChargedRuns, hours(r.ChargedGPUHours, 2))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(unknown) > 0 {
		fmt.Fprintf(out, "whole GPUs of pools %s are not in VRAM-GiB-hours: the site policy gives no pool.<name>.gpu_vram for them\n",
			strings.Join(unknown, ", "))
	}
	return nil
}

func hours(h float64, decimals int) string { return strconv.FormatFloat(h, 'f', decimals, 64) }
