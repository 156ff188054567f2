package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// juice-slurm report against the real PostgreSQL, figures worked out by hand. Period: 2026-01-01 00:00 to 10:00
// UTC. Runs (ready to final):
//
//	alice physics a100 2 whole GPUs  01:00-04:00  6 GPU-h; a100's GPUs have 80 GiB: 2 × 80 × 3 = 480 VRAM-GiB-h
//	alice physics demo 1 GPU 8 GiB   02:00-02:30  0.5 GPU-h, 8 × 0.5 = 4 VRAM-GiB-h
//	alice physics a100 1 GPU 16 GiB  05:00-06:00  1 GPU-h, 16 VRAM-GiB-h (its slice, not the pool's 80 GiB)
//	bob   ml      demo 3 whole GPUs  09:00-11:00  1 h within: 3 GPU-h; demo's GPU VRAM unknown: 3 GPU-h apart
//	carol (none)  a100 1 GPU         failed, never ready: nothing
//
// What Slurm charged (the job's start to its end in Slurm, × the license count, its GPUs; a slice 1):
//
//	alice job 1  01:10-03:40  2 × 2.5 h = 5;  job 2 (a slice)  02:00-02:30  1 × 0.5 = 0.5
//	alice job 5  05:00-06:00  1, counted once though a second reservation of the run (after a yield) has the times
//	bob   job 3  09:30-11:00  0.5 h within: 3 × 0.5 = 1.5;  job 6  07:00, no end seen, final at 07:30: 0.5
//	carol job 4  never started: nothing
func TestReportFigures(t *testing.T) {
	url, pool, st := migratedStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	add := func(job uint32, user, account, poolName string, gpus int, vram uint64, state reconcile.State, ready *time.Time, end time.Time,
		slurm ...*time.Time) {
		r, _, err := st.EnsureRun(ctx, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c1", JobID: job},
			Request: request.Request{Pool: poolName, GPUs: gpus, VRAM: vram}, UserName: user, Account: account, Reason: "test"})
		require.NoError(t, err)
		// A fixture: the times the reconciler would have written.
		_, err = pool.Exec(ctx, `UPDATE juice_reservations SET state = $2, ready_at = $3, updated_at = $4 WHERE id = $1`,
			r.ID, string(state), ready, end)
		require.NoError(t, err)
		if len(slurm) == 2 { // and those the poller would have: Slurm's start and end of the run's job
			require.NoError(t, st.ObserveTimes(ctx, r.ID, *slurm[0], zeroIfNil(slurm[1])))
		}
	}
	at := func(h, m int) *time.Time {
		x := t0.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
		return &x
	}
	add(1, "alice", "physics", "a100", 2, 0, reconcile.StateReleased, at(1, 0), *at(4, 0), at(1, 10), at(3, 40))
	add(2, "alice", "physics", "demo", 1, 8*vram.GiB, reconcile.StateReleased, at(2, 0), *at(2, 30), at(2, 0), at(2, 30))
	add(3, "bob", "ml", "demo", 3, 0, reconcile.StateReleased, at(9, 0), *at(11, 0), at(9, 30), at(11, 0))
	// Job 5's run: its first reservation let go without ending the run (a yield), then a second one.
	add(5, "alice", "physics", "a100", 1, 16*vram.GiB, reconcile.StateReleased, at(5, 0), *at(6, 0), at(5, 0), at(6, 0))
	add(5, "alice", "physics", "a100", 1, 16*vram.GiB, reconcile.StateReleased, nil, *at(6, 0), at(5, 0), at(6, 0))
	add(4, "carol", "", "a100", 1, 0, reconcile.StateFailed, nil, *at(3, 0))
	add(6, "bob", "ml", "a100", 1, 0, reconcile.StateFailed, nil, *at(7, 30), at(7, 0), nil)
	policyFile := filepath.Join(t.TempDir(), "juice-policy.conf")
	require.NoError(t, os.WriteFile(policyFile, []byte("pool.a100.gpu_vram = 80GiB\n"), 0o644))
	args := []string{"--config=", "--database-url", url, "--cluster", "c1", "--policy", policyFile,
		"--since", "2026-01-01T00:00:00Z", "--until", "2026-01-01T10:00:00Z"}

	var out bytes.Buffer
	require.NoError(t, runReport(ctx, &out, append(args, "--by", "user", "--format", "json")))
	var rep reportOut
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	require.Equal(t, "user", rep.By)
	require.Equal(t, t0, rep.Since)
	require.Len(t, rep.Rows, 2, out.String())
	require.Equal(t, "alice", rep.Rows[0].Key)
	require.Equal(t, 3, rep.Rows[0].Runs)
	require.InDelta(t, 7.5, rep.Rows[0].GPUHours, 1e-9)
	require.InDelta(t, 500, rep.Rows[0].VRAMGiBHours, 1e-9)
	require.InDelta(t, 0, rep.Rows[0].UnknownVRAMGPUHrs, 1e-9)
	require.Equal(t, "bob", rep.Rows[1].Key)
	require.InDelta(t, 3, rep.Rows[1].GPUHours, 1e-9)
	require.InDelta(t, 0, rep.Rows[1].VRAMGiBHours, 1e-9)
	require.InDelta(t, 3, rep.Rows[1].UnknownVRAMGPUHrs, 1e-9)
	require.InDelta(t, 10.5, rep.Total.GPUHours, 1e-9)
	require.InDelta(t, 500, rep.Total.VRAMGiBHours, 1e-9)
	require.Equal(t, []string{"demo"}, rep.UnknownVRAMPools)
	require.Equal(t, 3, rep.Rows[0].ChargedRuns)
	require.InDelta(t, 6.5, rep.Rows[0].ChargedGPUHours, 1e-9)
	require.Equal(t, 2, rep.Rows[1].ChargedRuns)
	require.InDelta(t, 2, rep.Rows[1].ChargedGPUHours, 1e-9)
	require.InDelta(t, 8.5, rep.Total.ChargedGPUHours, 1e-9)

	out.Reset()
	require.NoError(t, runReport(ctx, &out, append(args, "--by", "pool", "--format", "csv")))
	require.Equal(t, "pool,runs,gpu_hours,vram_gib_hours,unknown_vram_gpu_hours,charged_runs,charged_gpu_hours\n"+
		"a100,2,7.0000,496.0000,0.0000,3,6.5000\n"+
		"demo,2,3.5000,4.0000,3.0000,2,2.0000\n", out.String())

	out.Reset()
	require.NoError(t, runReport(ctx, &out, append(args, "--by", "account")))
	table := out.String()
	for _, want := range []string{"ACCOUNT", "GPU-HOURS", "VRAM-GIB-HOURS", "UNKNOWN-VRAM GPU-HOURS",
		"CHARGED RUNS", "CHARGED GPU-HOURS",
		"ml 1 3.00 0.00 3.00 2 2.00", "physics 3 7.50 500.00 0.00 3 6.50", "total 4 10.50 500.00 3.00 5 8.50",
		"whole GPUs of pools demo are not in VRAM-GiB-hours"} {
		require.Contains(t, strings.Join(strings.Fields(table), " "), strings.Join(strings.Fields(want), " "), table)
	}

	// Bad usage is exit status 2, before the database is dialled.
	for _, bad := range [][]string{{"--by", "user"}, {"--since", "1d"}, {"--since", "1d", "--by", "group"},
		{"--since", "1d", "--by", "user", "--format", "xml"}, {"--since", "yesterday", "--by", "user"},
		{"--since", "2026-01-02", "--until", "2026-01-01", "--by", "user"}} {
		err := runReport(ctx, &out, append([]string{"--config=", "--database-url", url, "--cluster", "c1"}, bad...))
		var u usageError
		require.True(t, errors.As(err, &u), "%v: %v", bad, err)
		require.Equal(t, 2, exitStatusOf(err), "%v", bad)
	}
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"36h":                  now.Add(-36 * time.Hour),
		"7d":                   now.Add(-7 * 24 * time.Hour),
		"0.5d":                 now.Add(-12 * time.Hour),
		"2026-12-01T08:00:00Z": time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC),
		"2026-12-01":           time.Date(2026, 12, 1, 0, 0, 0, 0, time.Local),
		"2026-12-01 08:30":     time.Date(2026, 12, 1, 8, 30, 0, 0, time.Local),
	} {
		got, err := parseWhen(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: %s, want %s", in, got, want)
	}
	for _, bad := range []string{"", "-1d", "-3h", "last week", "2026-13-01"} {
		_, err := parseWhen(bad, now)
		require.Error(t, err, bad)
	}
}

func zeroIfNil(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
