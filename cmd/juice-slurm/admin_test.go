package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/test/world"
)

// migratedStore is cluster c1's store on a new database of the test bed's PostgreSQL (test/world), migrated by
// the owner role, with its URL and pool for the tests that look under the store: all the runtime role's, the one
// the admin commands connect as at a site.
func migratedStore(t *testing.T) (string, *pgxpool.Pool, *store.Store) {
	t.Helper()
	w := world.New(t, world.Config{})
	return w.DB.Runtime, w.Pool, w.Store
}

// adminWorld is a database with cluster c1's job 5 (run 0 released, run 1 waiting) and job 6 (pending).
func adminWorld(t *testing.T) (args []string) {
	t.Helper()
	url, _, st := migratedStore(t)
	ctx := context.Background()
	move := func(run reconcile.RunID, req request.Request, evs ...reconcile.Event) {
		r, _, err := st.EnsureRun(ctx, reconcile.NewReservation{Run: run, Request: req, UserName: "alice", Partition: "gpu",
			JobState: "PENDING", Reason: "seen by the test"})
		require.NoError(t, err)
		for _, ev := range evs {
			tr, err := reconcile.Apply(&r, ev, "test: "+string(ev), time.Now())
			require.NoError(t, err)
			if ev == reconcile.EventQueued {
				r.Status.SessionID = "sess-" + string(rune('a'+run.Run))
			}
			require.NoError(t, st.SaveStatus(ctx, &r, tr))
		}
	}
	two := request.Request{Pool: "demo", GPUs: 2}
	move(reconcile.RunID{Cluster: "c1", JobID: 5, Run: 0}, two, reconcile.EventUnwanted)
	move(reconcile.RunID{Cluster: "c1", JobID: 5, Run: 1}, two, reconcile.EventRequest, reconcile.EventQueued)
	move(reconcile.RunID{Cluster: "c1", JobID: 6}, request.Request{Pool: "demo", GPUs: 1, VRAM: 3 * vram.GiB})
	return []string{"--config=", "--database-url", url, "--cluster", "c1"}
}

// status and describe print JSON for scripts, with dated UTC times, and tables with dated local times; a job
// without a reservation is "not found" (exit status 3).
func TestAdminCommandsSpeakJSON(t *testing.T) {
	args := adminWorld(t)
	ctx := context.Background()

	var out bytes.Buffer
	require.NoError(t, runStatus(ctx, &out, append(args, "--json")))
	var status statusOut
	require.NoError(t, json.Unmarshal(out.Bytes(), &status), out.String())
	require.Equal(t, "c1", status.Cluster)
	require.Nil(t, status.Leader, "no controller leads")
	require.Len(t, status.Pools, 1)
	require.Equal(t, map[string]int{"pending": 1, "requesting": 0, "waiting": 1, "ready": 0, "releasing": 0, "released": 1,
		"failed": 0}, status.Pools[0].States)
	require.Len(t, status.Runs, 2, "the open runs")
	byJob := map[uint32]reservationJS{}
	for _, r := range status.Runs {
		byJob[r.Job] = r
	}
	require.Equal(t, "waiting", byJob[5].State)
	require.Equal(t, 1, byJob[5].Run)
	require.Equal(t, "sess-b", byJob[5].SessionID)
	require.Equal(t, requestOut{Pool: "demo", GPUs: 1, VRAMBytes: 3 << 30, Text: "juice:v1:pool=demo,gpus=1,vram=3221225472"},
		byJob[6].Request)
	require.Equal(t, time.UTC, byJob[6].Created.Location())
	require.WithinDuration(t, time.Now(), byJob[6].Created, time.Hour, "a real time, not a zero one")

	out.Reset()
	require.NoError(t, runJobCommand(ctx, &out, "describe", "5", append(args, "--json")))
	var runs []reservationJS
	require.NoError(t, json.Unmarshal(out.Bytes(), &runs), out.String())
	require.Len(t, runs, 2)
	var last reservationJS
	for _, r := range runs {
		if r.Run == 1 {
			last = r
		}
	}
	var steps []string
	for _, e := range last.Events {
		steps = append(steps, e.From+">"+e.To+":"+e.Event)
		require.False(t, e.At.IsZero())
	}
	require.Equal(t, []string{">pending:created", "pending>requesting:request", "requesting>waiting:queued"}, steps)

	out.Reset()
	require.NoError(t, runJobCommand(ctx, &out, "describe", "5", args))
	require.Regexp(t, regexp.MustCompile(`(?m)^  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\s+pending\s+requesting\s+request`), out.String(),
		"the events' times carry their date")

	err := runJobCommand(ctx, &out, "describe", "99", args)
	require.ErrorContains(t, err, "job 99 of cluster c1 has no Juice reservation")
	require.Equal(t, exitNotFound, exitStatusOf(err))
	require.Equal(t, exitUsage, exitStatusOf(runJobCommand(ctx, &out, "describe", "5x", args)))

	out.Reset()
	require.NoError(t, runJobCommand(ctx, &out, "release", "5", append(args, "--json")))
	require.JSONEq(t, `{"job":5,"released_runs":[1]}`, out.String())
}

// version prints the binary's version and schema, and the database's when it is given one.
func TestVersionPrintsTheSchemas(t *testing.T) {
	args := adminWorld(t)
	var out bytes.Buffer
	require.NoError(t, runVersion(context.Background(), &out, []string{"--config="}))
	require.Equal(t, fmt.Sprintf("juice-slurm %s (%s)\nschema: %d (the newest this binary knows)\n", Version, runtime.Version(),
		store.KnownSchema()), out.String())
	out.Reset()
	require.NoError(t, runVersion(context.Background(), &out, args[:3]))
	require.Contains(t, out.String(), fmt.Sprintf("\ndatabase schema: %d\n", store.KnownSchema()))
	require.Error(t, runVersion(context.Background(), &out, []string{"--config=", "--database-url", "postgres://nobody@127.0.0.1:1/x"}))
}

// An array's job id describes its elements, those bound to the job id slurmctld gave them and those reserved
// ahead without one; status names an element not started yet by array and task.
func TestDescribeAnArrayShowsItsElements(t *testing.T) {
	url, _, st := migratedStore(t)
	ctx := context.Background()
	req := request.Request{Pool: "demo", GPUs: 1}
	for _, run := range []reconcile.RunID{
		{Cluster: "c1", JobID: 41, ArrayJobID: 40, ArrayTaskID: 0},
		{Cluster: "c1", ArrayJobID: 40, ArrayTaskID: 1},
	} {
		_, _, err := st.EnsureRun(ctx, reconcile.NewReservation{Run: run, Request: req, UserName: "alice", JobState: "PENDING", Reason: "test"})
		require.NoError(t, err)
	}
	args := []string{"--config=", "--database-url", url, "--cluster", "c1"}
	var out bytes.Buffer
	require.NoError(t, runJobCommand(ctx, &out, "describe", "40", append(args, "--json")))
	var runs []reservationJS
	require.NoError(t, json.Unmarshal(out.Bytes(), &runs), out.String())
	require.Len(t, runs, 2)
	zero, one := uint32(0), uint32(1)
	require.Equal(t, []uint32{41, 0}, []uint32{runs[0].Job, runs[1].Job})
	require.Equal(t, []*uint32{&zero, &one}, []*uint32{runs[0].ArrayTaskID, runs[1].ArrayTaskID})
	require.Equal(t, []uint32{40, 40}, []uint32{runs[0].ArrayJobID, runs[1].ArrayJobID})
	out.Reset()
	require.NoError(t, runStatus(ctx, &out, args))
	require.Regexp(t, `(?m)^40_1\s+0\s+alice`, out.String())
	require.Regexp(t, `(?m)^41 \(40_0\)\s+0\s+alice`, out.String())
}

// status --licenses (licenses = true) shows each pool's license count in slurmdbd, or why it could not read them.
func TestStatusWritesLicenses(t *testing.T) {
	var out strings.Builder
	require.NoError(t, writeLicenses(&out, map[string]int{"test": 6, "demo": 0}, nil))
	require.Equal(t, "\nLICENSE           COUNT\njuice_demo@juice  0\njuice_test@juice  6\n", out.String())
	out.Reset()
	require.NoError(t, writeLicenses(&out, nil, errors.New("read the Juice licenses: /usr/bin/sacctmgr: exit status 1: Connection refused")))
	require.Equal(t, "\nlicenses: cannot read them: read the Juice licenses: /usr/bin/sacctmgr: exit status 1: Connection refused\n", out.String())
	out.Reset()
	require.NoError(t, writeLicenses(&out, map[string]int{}, nil))
	require.Contains(t, out.String(), "no Juice license")
}
