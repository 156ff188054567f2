package controller

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
)

// enqueued records what a poller hands to the reconciler.
type enqueued struct {
	mu  sync.Mutex
	ids []uuid.UUID
}

func (e *enqueued) add(id uuid.UUID) { e.mu.Lock(); e.ids = append(e.ids, id); e.mu.Unlock() }

func (h *harness) poller() (*Poller, *enqueued) {
	e := &enqueued{}
	return &Poller{Slurm: h.slurm, Store: h.store, Cluster: "c1", Lookahead: reconcile.DefaultLookahead, Log: h.log, Enqueue: e.add}, e
}

var errSlurmDown = errors.New("slurmrestd: connection refused")

func failing[T any](calls *atomic.Int32) func(ctx context.Context, _ T) error {
	return func(context.Context, T) error { calls.Add(1); return errSlurmDown }
}

// A listing that fails, or hangs until the poll gives up, changes nothing; the next good one does the work.
func TestPollerListingFailsOrHangs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, queued := h.poller()
	h.slurm.Set(fakeslurm.JuiceJob(1, 0, slurmrest.StateRunning, "juice:v1:pool=test,gpus=1"))
	for name, fault := range map[string]func(ctx context.Context) error{
		"error": func(context.Context) error { return errSlurmDown },
		"hang":  fakeslurm.Hang,
	} {
		h.slurm.Intercept(fakeslurm.Funcs{ListJobs: func(ctx context.Context, _ time.Time, _ func(context.Context, time.Time) (slurmrest.JobList, error)) (slurmrest.JobList, error) {
			return slurmrest.JobList{}, fault(ctx)
		}})
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := p.Poll(pctx)
		cancel()
		require.Error(t, err, name)
		open, err := h.store.Open(ctx)
		require.NoError(t, err)
		require.Empty(t, open, "%s: a failed poll creates nothing", name)
	}
	h.slurm.Intercept(fakeslurm.Funcs{})
	require.NoError(t, p.Poll(ctx))
	open, err := h.store.Open(ctx)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, []uuid.UUID{open[0].ID}, queued.ids)
}

// The poller hands the look-ahead each job's account from slurmrestd: four users of one account, each within the
// per-user cap, get only the account's places, and another account's job is reserved ahead too.
func TestPollerCapsLookaheadPerAccount(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, _ := h.poller()
	p.Lookahead = reconcile.Lookahead{PerPool: 4, PerUser: 2, PerAccount: 2}
	for i, u := range []string{"ann", "ben", "cat", "dan", "eve"} {
		j := fakeslurm.JuiceJob(uint32(31+i), 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=1")
		j.UserName, j.Account, j.Priority, j.StateReason = u, "lab1", uint64(100-i), "Priority"
		if u == "eve" {
			j.Account = "lab2"
		}
		h.slurm.Set(j)
	}
	require.NoError(t, p.Poll(ctx))
	open, err := h.store.Open(ctx)
	require.NoError(t, err)
	var jobs []uint32
	for _, r := range open {
		jobs = append(jobs, r.Run.JobID)
	}
	require.ElementsMatch(t, []uint32{31, 32, 35}, jobs)
}

// A job missing from the listing is released only once a GET confirms it is gone: a failing confirmation
// leaves the reservation wanted, and the poll says so.
func TestPollerConfirmsAVanishedJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, _ := h.poller()
	h.slurm.Set(fakeslurm.JuiceJob(2, 0, slurmrest.StateRunning, "juice:v1:pool=test,gpus=1"))
	require.NoError(t, p.Poll(ctx))
	h.slurm.Remove(2)
	var gets atomic.Int32
	h.slurm.Intercept(fakeslurm.Funcs{GetJob: func(ctx context.Context, id uint32, _ func(context.Context, uint32) (*slurmrest.Job, error)) (*slurmrest.Job, error) {
		return nil, failing[uint32](&gets)(ctx, id)
	}})
	err := p.Poll(ctx)
	require.ErrorIs(t, err, errSlurmDown)
	require.Equal(t, int32(1), gets.Load())
	r, err := h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 2})
	require.NoError(t, err)
	require.True(t, r.Spec.Wanted, "not released on an unconfirmed absence")

	h.slurm.Intercept(fakeslurm.Funcs{})
	require.NoError(t, p.Poll(ctx))
	r, err = h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 2})
	require.NoError(t, err)
	require.False(t, r.Spec.Wanted)
	require.True(t, r.Spec.RunOver)
	require.Equal(t, "GONE", r.Spec.JobState)
	require.Contains(t, r.Spec.WantReason, "gone from slurmctld")
}

// A listing older than the prolog that registered a requeued run still shows the old run: the new run's
// reservation is left alone, and the old run's is let go.
func TestPollerStaleListingAfterARequeue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, _ := h.poller()
	req := "juice:v1:pool=test,gpus=1"
	h.slurm.Set(fakeslurm.JuiceJob(3, 1, slurmrest.StateConfiguring, req))
	stale := fakeslurm.New()
	stale.Set(fakeslurm.JuiceJob(3, 0, slurmrest.StateRunning, req))
	old := stale.Listing()
	old.LastUpdate = time.Now().Add(-time.Hour) // older than anything the real listing says
	h.slurm.Intercept(fakeslurm.Funcs{ListJobs: func(context.Context, time.Time, func(context.Context, time.Time) (slurmrest.JobList, error)) (slurmrest.JobList, error) {
		return old, nil
	}})
	run1 := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 3, Run: 1}, request.Request{Pool: "test", GPUs: 1})
	require.NoError(t, p.Poll(ctx))
	r1, err := h.store.Get(ctx, run1.ID)
	require.NoError(t, err)
	require.True(t, r1.Spec.Wanted, "the newer run is not judged by an older listing")
	rs, err := h.store.ForJob(ctx, 3)
	require.NoError(t, err)
	require.Len(t, rs, 2, "the stale listing reserved run 0, which it still shows running")
	h.slurm.Intercept(fakeslurm.Funcs{})
	require.NoError(t, p.Poll(ctx))
	r0, err := h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 3})
	require.NoError(t, err)
	require.False(t, r0.Spec.Wanted, "run 0 is let go once the listing shows run 1")
	require.Contains(t, r0.Spec.WantReason, "requeued")
}

// LISTEN is down when another replica registers a run: its NOTIFY is lost. After the hub subscribes again, the
// leader re-lists and serves the run within one poll interval, not at the next resync.
func TestRunRegisteredWhileListenIsDownIsServedWithinOnePoll(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	gate := make(chan struct{})
	var connects atomic.Int32
	listen := func(ctx context.Context) (*pgx.Conn, error) {
		if connects.Add(1) > 1 {
			select { // a reconnect waits for the test
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return pgx.Connect(ctx, h.dbURL)
	}
	poll := time.Second
	h.slurm.Set(fakeslurm.JuiceJob(70, 0, slurmrest.StateConfiguring, "juice:v1:pool=test,gpus=1"))
	// The listing never shows job 70, and the resync is far away: only a re-list can find the run.
	h.slurm.Intercept(fakeslurm.Funcs{ListJobs: func(context.Context, time.Time, func(context.Context, time.Time) (slurmrest.JobList, error)) (slurmrest.JobList, error) {
		return slurmrest.JobList{LastUpdate: time.Now()}, nil
	}})
	h.startControllerOf(h.store, h.slurm, "a", Config{PollInterval: poll, Resync: time.Hour}, func(c *Controller) { c.listen = listen })
	// Leading, listening, and past its first re-list (which comes before its first poll): from now on only a
	// re-list after the reconnect can pick up a run.
	eventually(t, 10*time.Second, "a leads, listens and has polled", func() bool {
		holder, _, _ := h.store.LeaseHolder(ctx, "reconciler/c1")
		return holder == "a" && listeners(t, h) == 1 && h.slurm.Lists() >= 1
	})
	_, err := h.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN `+store.NotifyChannel+`'`)
	require.NoError(t, err)
	eventually(t, 10*time.Second, "the hub tries to listen again", func() bool { return connects.Load() >= 2 })

	run := reconcile.RunID{Cluster: "c1", JobID: 70}
	h.ensure(run, request.Request{Pool: "test", GPUs: 1}) // as another replica's prolog would
	time.Sleep(300 * time.Millisecond)                    // its notification is long lost
	require.Equal(t, reconcile.StatePending, h.stateOf(run))
	close(gate)
	start := time.Now()
	eventually(t, poll, "served after the hub listens again", func() bool { return h.stateOf(run) == reconcile.StateReady })
	t.Logf("served %s after LISTEN was back", time.Since(start).Round(time.Millisecond))
}

func listeners(t *testing.T, h *harness) int {
	var n int
	err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN `+store.NotifyChannel+`'`).Scan(&n)
	require.NoError(t, err)
	return n
}

// Two clusters on one database, each with its controller: each serves only its own jobs, and neither touches the
// other's reservations, even with the same job ids.
func TestTwoClustersShareADatabase(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	c2 := store.New(h.pool, "c2")
	slurm2 := fakeslurm.New()
	req := "juice:v1:pool=test,gpus=1"
	h.slurm.Set(fakeslurm.JuiceJob(1, 0, slurmrest.StateRunning, req))
	slurm2.Set(fakeslurm.JuiceJob(1, 0, slurmrest.StateRunning, req), fakeslurm.JuiceJob(2, 0, slurmrest.StateRunning, req))
	h.startController("one", Config{})
	h.startControllerOf(c2, slurm2, "two", Config{}, nil)
	ready := func(st *store.Store, job uint32) bool {
		r, err := st.ForRun(ctx, reconcile.RunID{Cluster: st.Cluster(), JobID: job})
		return err == nil && r.Status.State == reconcile.StateReady
	}
	eventually(t, 10*time.Second, "every job of both clusters is served", func() bool {
		return ready(h.store, 1) && ready(c2, 1) && ready(c2, 2)
	})
	require.Len(t, h.liveSessions(), 3)
	one, err := h.store.Open(ctx)
	require.NoError(t, err)
	require.Len(t, one, 1, "cluster c1 has one run; job 2 of c2 is not its")
	// c2's job 1 ends: only c2's run 1 is released.
	slurm2.Remove(1)
	eventually(t, 10*time.Second, "c2's job 1 released", func() bool {
		r, err := c2.ForRun(ctx, reconcile.RunID{Cluster: "c2", JobID: 1})
		return err == nil && r.Status.State == reconcile.StateReleased
	})
	time.Sleep(500 * time.Millisecond)
	require.True(t, ready(h.store, 1), "c1's job 1 is untouched")
	require.Len(t, h.liveSessions(), 2)
	for _, l := range []string{"reconciler/c1", "reconciler/c2"} {
		holder, _, err := h.store.LeaseHolder(ctx, l)
		require.NoError(t, err)
		require.NotEmpty(t, holder, "each cluster has its own leader")
	}
}
