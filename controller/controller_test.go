package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
)

var errCrash = errors.New("simulated crash")

// crashingJuice forwards a request to the controller and then "crashes" before the answer is used, as a
// reconciler killed between the two would.
type crashingJuice struct {
	juiceapi.Client
	sent bool // forward the request before crashing (the answer is lost) or crash before sending it
}

func (c crashingJuice) RequestSession(ctx context.Context, key uuid.UUID, req juiceapi.SessionRequest) (string, error) {
	if c.sent {
		if _, err := c.Client.RequestSession(ctx, key, req); err != nil {
			return "", err
		}
	}
	return "", errCrash
}

// A crash between the committed intent and the request, or between the request and storing its answer, then
// a restart: exactly one session, the one the run ends up with.
func TestCrashBetweenIntentAndActionGivesOneSession(t *testing.T) {
	t.Parallel()
	for _, sent := range []bool{false, true} {
		h := newHarness(t)
		ctx := context.Background()
		run := reconcile.RunID{Cluster: "c1", JobID: 1, Run: 0}
		r, _, err := h.store.Ensure(ctx, reconcile.NewReservation{Run: run, Request: reconcile.Request{Pool: "test", GPUs: 2}})
		require.NoError(t, err)

		_, err = h.reconciler(crashingJuice{h.juice, sent}).Reconcile(ctx, r.ID)
		require.ErrorIs(t, err, errCrash)
		got, err := h.store.Get(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, reconcile.StateRequesting, got.State, "the intent is committed before the request")
		require.Empty(t, got.SessionID)
		if sent {
			require.Len(t, h.liveSessions(), 1, "the lost request made a session")
		}

		// The restarted reconciler asks again with the same key.
		restarted := h.reconciler(nil)
		for i := 0; i < 5 && got.State != reconcile.StateReady; i++ {
			_, err = restarted.Reconcile(ctx, r.ID)
			require.NoError(t, err)
			got, _ = h.store.Get(ctx, r.ID)
		}
		require.Equal(t, reconcile.StateReady, got.State)
		live := h.liveSessions()
		require.Len(t, live, 1, "sent=%v: exactly one session", sent)
		require.Equal(t, live[0].ID, got.SessionID)
		require.Len(t, h.sim.Sim.Sessions(), 1, "sent=%v: no second session was ever booked", sent)

		env, err := reconcile.OpenSession(h.key, got.Sealed, run)
		require.NoError(t, err)
		require.Contains(t, env, reconcile.EnvVar{Name: "JUICE_SESSION_ID", Value: got.SessionID})
		require.Contains(t, env, reconcile.EnvVar{Name: "JUICE_GPU_COUNT", Value: "2"})
	}
}

// A pending job that vanishes from slurmctld is released within two polls.
func TestVanishedPendingJobIsReleasedWithinTwoPolls(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.slurm.Set(fakeslurm.JuiceJob(7, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=1"))
	run := reconcile.RunID{Cluster: "c1", JobID: 7}
	// A long poll interval: the test counts polls, and wants each to be a separate tick.
	h.startController("a", Config{PollInterval: 300 * time.Millisecond})
	eventually(t, 10*time.Second, "the pending job's session is ready", func() bool { return h.stateOf(run) == reconcile.StateReady })
	require.Len(t, h.liveSessions(), 1)

	before := h.slurm.Lists()
	h.slurm.Remove(7)
	eventually(t, 10*time.Second, "the vanished job's reservation is released", func() bool { return h.stateOf(run) == reconcile.StateReleased })
	polls := h.slurm.Lists() - before
	require.LessOrEqual(t, polls, 2, "released after %d polls", polls)
	require.Empty(t, h.liveSessions(), "the session was cancelled")
	r, _ := h.store.ForRun(context.Background(), run)
	evs, err := h.store.Events(context.Background(), r.ID)
	require.NoError(t, err)
	require.Contains(t, evs[len(evs)-2].Reason, "job 7 is gone from slurmctld")
}

// Two controllers on one database: one leads; killed, the other takes over within the lease time and serves.
func TestLeaderHandoverWithinLeaseTime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ttl := 2 * time.Second
	_, stopA := h.startController("a", Config{LeaseTTL: ttl, LeaseRenew: 300 * time.Millisecond})
	eventually(t, 5*time.Second, "a leads", func() bool {
		holder, _, _ := h.store.LeaseHolder(context.Background(), "reconciler/c1")
		return holder == "a"
	})
	_, _ = h.startController("b", Config{LeaseTTL: ttl, LeaseRenew: 300 * time.Millisecond})
	time.Sleep(time.Second)
	holder, _, _ := h.store.LeaseHolder(context.Background(), "reconciler/c1")
	require.Equal(t, "a", holder, "b does not take a lease that a renews")

	killed := time.Now()
	stopA(true)
	eventually(t, ttl+2*time.Second, "b leads", func() bool {
		holder, _, _ := h.store.LeaseHolder(context.Background(), "reconciler/c1")
		return holder == "b"
	})
	took := time.Since(killed)
	require.Less(t, took, ttl+time.Second, "handover took %s", took)
	t.Logf("handover after %s (lease %s)", took.Round(time.Millisecond), ttl)

	// The new leader reconciles.
	h.slurm.Set(fakeslurm.JuiceJob(9, 0, slurmrest.StateRunning, "juice:v1:pool=test,gpus=1,vram=1073741824"))
	eventually(t, 10*time.Second, "b serves a new job", func() bool {
		return h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 9}) == reconcile.StateReady
	})
}

// A requeued job: the old run's session is released, the new run gets its own, and may begin at once.
func TestRequeuedJobGetsANewSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	req := "juice:v1:pool=test,gpus=2"
	h.slurm.Set(fakeslurm.JuiceJob(5, 0, slurmrest.StateRunning, req))
	h.startController("a", Config{})
	run0, run1 := reconcile.RunID{Cluster: "c1", JobID: 5, Run: 0}, reconcile.RunID{Cluster: "c1", JobID: 5, Run: 1}
	eventually(t, 10*time.Second, "run 0 ready", func() bool { return h.stateOf(run0) == reconcile.StateReady })
	r0, _ := h.store.ForRun(context.Background(), run0)

	// Requeued: back to PENDING with restart count 1 and Slurm's requeue delay.
	j := fakeslurm.JuiceJob(5, 1, slurmrest.StatePending, req)
	j.StateReason = "BeginTime"
	h.slurm.Set(j)
	eventually(t, 10*time.Second, "run 0 released and run 1 ready", func() bool {
		return h.stateOf(run0) == reconcile.StateReleased && h.stateOf(run1) == reconcile.StateReady
	})
	r1, _ := h.store.ForRun(context.Background(), run1)
	require.NotEqual(t, r0.SessionID, r1.SessionID)
	live := h.liveSessions()
	require.Len(t, live, 1)
	require.Equal(t, r1.SessionID, live[0].ID)
	eventually(t, 5*time.Second, "the requeued run is let begin now", func() bool {
		for _, u := range h.slurm.Updates() {
			if u.BeginNow {
				return true
			}
		}
		return false
	})
}

// The hook API: a prolog for a run the poller never saw registers it and returns its session; the epilog
// releases it; calls without the secret get 401 and change nothing.
func TestHookAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c, _ := h.startController("a", Config{})
	base := "http://" + c.Listener.Addr().String()
	// Job 42 is CONFIGURING: its prolog runs. Its listing carries no request (say job_submit.lua is missing), so
	// only the prolog can register it.
	j42 := fakeslurm.JuiceJob(42, 0, slurmrest.StateConfiguring, "")
	h.slurm.Set(j42)
	post := func(path, secret string, in any) (int, map[string]any) {
		b, _ := json.Marshal(in)
		req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	pro := PrologRequest{Cluster: "c1", JobID: 42, Run: 0, Request: "juice:v1:pool=test,gpus=1", WaitSeconds: 10}
	code, _ := post("/v1/prolog", "", pro)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post("/v1/prolog", "wrong-secret-wrong-secret", pro)
	require.Equal(t, http.StatusUnauthorized, code)
	_, err := h.store.ForRun(context.Background(), reconcile.RunID{Cluster: "c1", JobID: 42})
	require.ErrorIs(t, err, reconcile.ErrNotFound, "an unauthenticated call changes nothing")

	code, out := post("/v1/prolog", "hook-secret-for-tests", pro)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, OutcomeReady, out["outcome"], "%v", out)
	require.Equal(t, "42.0.session", out["file"])
	require.Len(t, h.liveSessions(), 1)

	code, out = post("/v1/prolog", "hook-secret-for-tests", PrologRequest{Cluster: "c1", JobID: 43, WaitSeconds: 1})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, OutcomeNone, out["outcome"])

	code, out = post("/v1/epilog", "hook-secret-for-tests", EpilogRequest{Cluster: "c1", JobID: 42, Run: 0, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, OutcomeReleased, out["outcome"], "%v", out)
	require.Empty(t, h.liveSessions())
}

// A request the pool can never fit fails with a reason a person can read, and the prolog hears it at once.
func TestNoCapacityFailsWithReason(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.slurm.Set(fakeslurm.JuiceJob(11, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=8"))
	h.startController("a", Config{})
	run := reconcile.RunID{Cluster: "c1", JobID: 11}
	eventually(t, 10*time.Second, "failed", func() bool { return h.stateOf(run) == reconcile.StateFailed })
	r, _ := h.store.ForRun(context.Background(), run)
	require.Contains(t, r.FailReason, "cannot ever fit 8 GPUs from pool test")
	require.Empty(t, h.liveSessions())
}

// The sweep cancels a session that carries one of our keys but whose reservation let go of it (here: a release
// recorded without the cancel reaching the controller), and leaves sessions it does not know alone.
func TestSweepCancelsOrphans(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	run := reconcile.RunID{Cluster: "c1", JobID: 3}
	r, _, err := h.store.Ensure(ctx, reconcile.NewReservation{Run: run, Request: reconcile.Request{Pool: "test", GPUs: 1}})
	require.NoError(t, err)
	rc := h.reconciler(nil)
	for i := 0; i < 4 && r.State != reconcile.StateReady; i++ {
		_, err = rc.Reconcile(ctx, r.ID)
		require.NoError(t, err)
		r, _ = h.store.Get(ctx, r.ID)
	}
	require.Equal(t, reconcile.StateReady, r.State)
	// Released in the database, but the session was never cancelled.
	for _, ev := range []reconcile.Event{reconcile.EventUnwanted, reconcile.EventClosed} {
		tr, err := reconcile.Apply(&r, ev, "test", time.Now())
		require.NoError(t, err)
		require.NoError(t, h.store.Save(ctx, &r, &tr))
	}
	foreign, err := h.juice.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 1})
	require.NoError(t, err)
	require.Len(t, h.liveSessions(), 2)

	require.NoError(t, Sweep(ctx, h.store, h.juice, h.log))
	live := h.liveSessions()
	require.Len(t, live, 1, "the orphan is cancelled")
	require.Equal(t, foreign, live[0].ID, "a session with a key we do not know is left alone")
}

// The epilog ends a run while the poller's listing still shows its job running (slurmrestd is slow, or down):
// the run is over, and the stale listing must not book it a second session.
func TestEndedRunIsNotReservedAgainFromAStaleListing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.slurm.Set(fakeslurm.JuiceJob(50, 0, slurmrest.StateRunning, "juice:v1:pool=test,gpus=1"))
	c, _ := h.startController("a", Config{})
	run := reconcile.RunID{Cluster: "c1", JobID: 50}
	eventually(t, 10*time.Second, "ready", func() bool { return h.stateOf(run) == reconcile.StateReady })
	b, _ := json.Marshal(EpilogRequest{Cluster: "c1", JobID: 50, WaitSeconds: 10})
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.Listener.Addr().String()+"/v1/epilog", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer hook-secret-for-tests")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	eventually(t, 10*time.Second, "released", func() bool { return h.stateOf(run) == reconcile.StateReleased })
	// Several polls over the stale listing (the job still RUNNING).
	h.slurm.Set(fakeslurm.JuiceJob(50, 0, slurmrest.StateRunning, "juice:v1:pool=test,gpus=1"))
	before := h.slurm.Lists()
	eventually(t, 10*time.Second, "three polls", func() bool { return h.slurm.Lists() >= before+3 })
	rs, err := h.store.ForJob(context.Background(), "c1", 50)
	require.NoError(t, err)
	require.Len(t, rs, 1, "one reservation for the run, ever")
	require.Len(t, h.sim.Sim.Sessions(), 1, "one session for the run, ever")
}
