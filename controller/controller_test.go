package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/controller/juiceport"
	"github.com/juice-slurm/juice-slurm/controller/sweep"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
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

var gpus2 = request.Request{Pool: "test", GPUs: 2}

// driveTo runs reconcile passes until the reservation reaches state (or fails the test).
func (h *harness) driveTo(rc *reconcile.Reconciler, id uuid.UUID, state reconcile.State) reconcile.Reservation {
	h.t.Helper()
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		r, err := h.store.Get(ctx, id)
		require.NoError(h.t, err)
		if r.Status.State == state {
			return r
		}
		_, err = rc.Reconcile(ctx, id)
		require.NoError(h.t, err)
	}
	h.t.Fatalf("reservation %s did not reach %s", id, state)
	return reconcile.Reservation{}
}

// A crash between the committed intent and the request, or between the request and storing its answer, then
// a restart: exactly one session, the one the run ends up with.
func TestCrashBetweenIntentAndActionGivesOneSession(t *testing.T) {
	t.Parallel()
	for _, sent := range []bool{false, true} {
		h := newHarness(t)
		ctx := context.Background()
		run := reconcile.RunID{Cluster: "c1", JobID: 1}
		r := h.ensure(run, gpus2)

		_, err := h.reconciler(crashingJuice{h.juice, sent}).Reconcile(ctx, r.ID)
		require.ErrorIs(t, err, errCrash)
		got, err := h.store.Get(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, reconcile.StateRequesting, got.Status.State, "the intent is committed before the request")
		require.Empty(t, got.Status.SessionID)
		if sent {
			require.Len(t, h.liveSessions(), 1, "the lost request made a session")
		}

		// The restarted reconciler asks again with the same key.
		got = h.driveTo(h.reconciler(nil), r.ID, reconcile.StateReady)
		live := h.liveSessions()
		require.Len(t, live, 1, "sent=%v: exactly one session", sent)
		require.Equal(t, live[0].ID, got.Status.SessionID)
		require.Len(t, h.sim.Sim.Sessions(), 1, "sent=%v: no second session was ever booked", sent)

		sealed, err := h.store.Sealed(ctx, r.ID)
		require.NoError(t, err)
		env, err := session.Open(sealed, run.Binding(), h.key)
		require.NoError(t, err)
		require.Contains(t, env, session.EnvVar{Name: "JUICE_SESSION_ID", Value: got.Status.SessionID})
		require.Contains(t, env, session.EnvVar{Name: "JUICE_GPU_COUNT", Value: "2"})
	}
}

// The reconciler honours "not wanted" in every state that serves the run: whatever it holds or asked for is let
// go, and no session is left.
func TestUnwantedIsHonouredInEveryServingState(t *testing.T) {
	t.Parallel()
	for i, state := range []reconcile.State{reconcile.StatePending, reconcile.StateRequesting, reconcile.StateWaiting, reconcile.StateReady} {
		h := newHarness(t)
		ctx := context.Background()
		r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: uint32(100 + i)}, gpus2)
		rc := h.reconciler(nil)
		if state == reconcile.StateRequesting {
			// Committed intent, and the request reached the controller, but its answer was lost.
			_, err := h.reconciler(crashingJuice{h.juice, true}).Reconcile(ctx, r.ID)
			require.ErrorIs(t, err, errCrash)
		} else if state == reconcile.StateWaiting {
			// The pool is full: the session stays queued.
			for i := 0; i < 2; i++ {
				_, err := h.juice.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 4})
				require.NoError(t, err)
			}
			h.driveTo(rc, r.ID, state)
		} else {
			h.driveTo(rc, r.ID, state)
		}
		changed, err := h.store.Unwant(ctx, r.ID, "job ended", true)
		require.NoError(t, err)
		require.True(t, changed)
		got := h.driveTo(rc, r.ID, reconcile.StateReleased)
		for _, s := range h.liveSessions() {
			require.NotEqual(t, r.ID.String(), s.IdempotencyKey, "from %s: no session of the run is left", state)
		}
		evs, err := h.store.Events(ctx, got.ID)
		require.NoError(t, err)
		unwanted := evs[len(evs)-1] // pending -> released
		if state != reconcile.StatePending {
			unwanted = evs[len(evs)-2] // -> releasing, then closed -> released
		}
		require.Equal(t, reconcile.EventUnwanted, unwanted.Event, "from %s", state)
		require.Equal(t, "job ended", unwanted.Reason, "from %s: the observer's reason is the transition's", state)
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
	holder := func() string {
		holder, _, _ := h.store.LeaseHolder(context.Background(), "reconciler/c1")
		return holder
	}
	eventually(t, 5*time.Second, "a leads", func() bool { return holder() == "a" })
	h.startController("b", Config{LeaseTTL: ttl, LeaseRenew: 300 * time.Millisecond})
	time.Sleep(time.Second)
	require.Equal(t, "a", holder(), "b does not take a lease that a renews")

	killed := time.Now()
	stopA(true)
	eventually(t, ttl+5*time.Second, "b leads", func() bool { return holder() == "b" })
	t.Logf("handover after %s (lease %s)", time.Since(killed).Round(time.Millisecond), ttl)

	// The new leader reconciles.
	h.slurm.Set(fakeslurm.JuiceJob(9, 0, slurmrest.StateRunning, "juice:v1:pool=test,gpus=1,vram=1073741824"))
	eventually(t, 10*time.Second, "b serves a new job", func() bool {
		return h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 9}) == reconcile.StateReady
	})
}

// A requeued job: the old run's session is released, the new run gets its own, and the job actor lets it
// begin at once.
func TestRequeuedJobGetsANewSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	req := "juice:v1:pool=test,gpus=2"
	h.slurm.Set(fakeslurm.JuiceJob(5, 0, slurmrest.StateRunning, req))
	h.startController("a", Config{})
	run0, run1 := reconcile.RunID{Cluster: "c1", JobID: 5}, reconcile.RunID{Cluster: "c1", JobID: 5, Run: 1}
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
	require.NotEqual(t, r0.Status.SessionID, r1.Status.SessionID)
	live := h.liveSessions()
	require.Len(t, live, 1)
	require.Equal(t, r1.Status.SessionID, live[0].ID)
	eventually(t, 5*time.Second, "the requeued run is let begin now", func() bool { return beganNow(h.slurm) > 0 })
}

func beganNow(s *fakeslurm.Slurm) int {
	n := 0
	for _, u := range s.Updates() {
		if u.BeginNow {
			n++
		}
	}
	return n
}

// post calls the hook API with a secret.
func post(t *testing.T, c *Controller, path, secret string, in any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(in)
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.Listener.Addr().String()+path, bytes.NewReader(b))
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

// The hook API: a prolog for a run the poller never saw registers it from the job's admin_comment and returns its
// session; the epilog releases it; calls without the secret get 401 and change nothing; a job without a request
// gets none.
func TestHookAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// The listing does not show the jobs yet: only the prolog can register job 42.
	h.slurm.Intercept(fakeslurm.Funcs{ListJobs: func(context.Context, time.Time, func(context.Context, time.Time) (slurmrest.JobList, error)) (slurmrest.JobList, error) {
		return slurmrest.JobList{LastUpdate: time.Now()}, nil
	}})
	c, _ := h.startController("a", Config{})
	h.slurm.Set(fakeslurm.JuiceJob(42, 0, slurmrest.StateConfiguring, "juice:v1:pool=test,gpus=1"),
		fakeslurm.JuiceJob(43, 0, slurmrest.StateConfiguring, ""))
	pro := hookapi.PrologRequest{Cluster: "c1", JobID: 42, WaitSeconds: 10}
	code, _ := post(t, c, "/v1/prolog", "", pro)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post(t, c, "/v1/prolog", "wrong-secret-wrong-secret", pro)
	require.Equal(t, http.StatusUnauthorized, code)
	_, err := h.store.ForRun(context.Background(), reconcile.RunID{Cluster: "c1", JobID: 42})
	require.ErrorIs(t, err, reconcile.ErrNotFound, "an unauthenticated call changes nothing")

	code, out := post(t, c, "/v1/prolog", hookSecret, pro)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReady, out["outcome"], "%v", out)
	require.Equal(t, "42.0.session", out["file"])
	require.Len(t, h.liveSessions(), 1)

	code, out = post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 43, WaitSeconds: 1})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeNone, out["outcome"])
	// A request in the call (the first release's prologs sent one, and may still wait when the replicas restart on
	// this release) is taken and not used: nothing is registered from it, the job's admin_comment decides.
	code, out = post(t, c, "/v1/prolog", hookSecret, map[string]any{"cluster": "c1", "job_id": 43, "run": 0,
		"request": "juice:v1:pool=test,gpus=4", "user": "root", "partition": "gpu", "wait_seconds": 1})
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, hookapi.OutcomeNone, out["outcome"], "the hook's request is not the job's")
	_, err = h.store.ForRun(context.Background(), reconcile.RunID{Cluster: "c1", JobID: 43})
	require.ErrorIs(t, err, reconcile.ErrNotFound, "nothing registered from a hook's request")
	// Any other field is not part of the API.
	code, _ = post(t, c, "/v1/prolog", hookSecret, map[string]any{"cluster": "c1", "job_id": 43, "run": 0,
		"gpus": 4, "wait_seconds": 1})
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "elsewhere", JobID: 42, WaitSeconds: 1})
	require.Equal(t, http.StatusBadRequest, code, "another cluster's run")

	// Nobody else waits for the pool: the epilog is answered at once (the release may be done already), and the
	// release goes on.
	code, out = post(t, c, "/v1/epilog", hookSecret, hookapi.EpilogRequest{Cluster: "c1", JobID: 42, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, []any{hookapi.OutcomeWaiting, hookapi.OutcomeReleased}, out["outcome"], "%v", out)
	eventually(t, 10*time.Second, "the session released", func() bool { return len(h.liveSessions()) == 0 })
}

// The epilog waits for its run's release only while another run waits for GPUs in the pool (its nodes, kept
// COMPLETING, then go to Slurm's next job once the GPUs are back); with nobody waiting it is answered at once.
func TestEpilogWaitsOnlyWhileAnotherRunWaitsForThePool(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// Another client holds one of the pool's two agents of 4 GPUs: job 44's 4 GPUs wait for job 42's one.
	_, err := h.juice.RequestSession(context.Background(), uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 4})
	require.NoError(t, err)
	h.slurm.Set(fakeslurm.JuiceJob(42, 0, slurmrest.StateConfiguring, "juice:v1:pool=test,gpus=1"),
		fakeslurm.JuiceJob(44, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=4"))
	c, _ := h.startController("a", Config{})
	code, out := post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 42, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReady, out["outcome"], "%v", out)
	eventually(t, 10*time.Second, "job 44 waits for the whole pool", func() bool {
		st := h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 44})
		return st == reconcile.StatePending || st == reconcile.StateRequesting || st == reconcile.StateWaiting
	})
	code, out = post(t, c, "/v1/epilog", hookSecret, hookapi.EpilogRequest{Cluster: "c1", JobID: 42, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReleased, out["outcome"], "job 44 waits: the epilog waits for the release: %v", out)
}

// A ready run's sealed session survives everything observers do (the first version's poller wiped it when it
// recorded the job's state): a prolog that comes after many polls gets the session.
func TestPrologAfterManyPollsGetsTheSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.slurm.Set(fakeslurm.JuiceJob(60, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=1"))
	c, _ := h.startController("a", Config{PollInterval: 20 * time.Millisecond})
	run := reconcile.RunID{Cluster: "c1", JobID: 60}
	eventually(t, 10*time.Second, "reserved while pending", func() bool { return h.stateOf(run) == reconcile.StateReady })
	// The job's state changes under the poller several times before the prolog runs.
	for _, st := range []slurmrest.JobState{slurmrest.StateConfiguring, slurmrest.StatePending, slurmrest.StateConfiguring} {
		h.slurm.Set(fakeslurm.JuiceJob(60, 0, st, "juice:v1:pool=test,gpus=1"))
		before := h.slurm.Lists()
		eventually(t, 5*time.Second, "two polls", func() bool { return h.slurm.Lists() >= before+2 })
	}
	r, _ := h.store.ForRun(context.Background(), run)
	require.Equal(t, "CONFIGURING", r.Spec.JobState, "the poller recorded the job's state")
	code, out := post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 60, WaitSeconds: 5})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReady, out["outcome"], "%v", out)
	require.NotEmpty(t, out["session"], "the sealed session is still there")
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
	require.Contains(t, r.Status.FailReason, "cannot ever fit 8 GPUs from pool test")
	require.Empty(t, h.liveSessions())
}

// A failed pending run does not take a place in the look-ahead for ever: the next job of its pool is reserved.
func TestFailedRunLeavesTheLookahead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	never := fakeslurm.JuiceJob(20, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=8")
	never.Priority = 1000
	next := fakeslurm.JuiceJob(21, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=1")
	h.slurm.Set(never, next)
	h.startController("a", Config{Lookahead: reconcile.Lookahead{PerPool: 1}})
	eventually(t, 10*time.Second, "the job that fits is reserved once the other failed", func() bool {
		return h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 20}) == reconcile.StateFailed &&
			h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 21}) == reconcile.StateReady
	})
	rs, err := h.store.ForJob(context.Background(), 20)
	require.NoError(t, err)
	require.Len(t, rs, 1, "the failed run is not reserved again")
}

// The sweep cancels a session that carries one of our keys but whose reservation let go of it (here: a release
// recorded without the cancel reaching the controller), and leaves sessions it does not know alone.
func TestSweepCancelsOrphans(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 3}, request.Request{Pool: "test", GPUs: 1})
	r = h.driveTo(h.reconciler(nil), r.ID, reconcile.StateReady)
	// Released in the database, but the session was never cancelled.
	for _, ev := range []reconcile.Event{reconcile.EventUnwanted, reconcile.EventClosed} {
		tr, err := reconcile.Apply(&r, ev, "test", time.Now())
		require.NoError(t, err)
		require.NoError(t, h.store.SaveStatus(ctx, &r, tr))
	}
	foreign, err := h.juice.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 1})
	require.NoError(t, err)
	require.Len(t, h.liveSessions(), 2)

	n, err := sweep.Sessions(ctx, h.store, juiceport.New(h.juice), h.log)
	require.NoError(t, err)
	require.Equal(t, 1, n)
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
	stale := h.slurm.Listing()
	h.slurm.Intercept(fakeslurm.Funcs{ListJobs: func(context.Context, time.Time, func(context.Context, time.Time) (slurmrest.JobList, error)) (slurmrest.JobList, error) {
		return stale, nil // the job still RUNNING, whatever happens
	}})
	code, _ := post(t, c, "/v1/epilog", hookSecret, hookapi.EpilogRequest{Cluster: "c1", JobID: 50, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	eventually(t, 10*time.Second, "released", func() bool { return h.stateOf(run) == reconcile.StateReleased })
	before := h.slurm.Lists()
	eventually(t, 10*time.Second, "three polls", func() bool { return h.slurm.Lists() >= before+3 })
	rs, err := h.store.ForJob(context.Background(), 50)
	require.NoError(t, err)
	require.Len(t, rs, 1, "one reservation for the run, ever")
	require.Len(t, h.sim.Sim.Sessions(), 1, "one session for the run, ever")
}

// SIGHUP's Retune reaches the running leader: a wider look-ahead reserves the pending jobs the narrower one left
// alone, at once (the poll interval here is an hour), with no restart.
func TestRetuneWidensTheLookaheadWithoutRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first := fakeslurm.JuiceJob(70, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=1")
	first.Priority = 1000
	h.slurm.Set(first, fakeslurm.JuiceJob(71, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=1"),
		fakeslurm.JuiceJob(72, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=1"))
	c, _ := h.startController("a", Config{PollInterval: time.Hour, Lookahead: reconcile.Lookahead{PerPool: 1}})
	eventually(t, 10*time.Second, "the first job reserved", func() bool {
		return h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 70}) == reconcile.StateReady
	})
	polls := h.slurm.Lists()
	for _, job := range []uint32{71, 72} {
		require.Empty(t, h.stateOf(reconcile.RunID{Cluster: "c1", JobID: job}), "job %d is beyond a look-ahead of 1", job)
	}
	require.NoError(t, c.Retune(Tuning{Lookahead: reconcile.Lookahead{PerPool: 3}}))
	eventually(t, 10*time.Second, "jobs 71 and 72 reserved after the retune", func() bool {
		return h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 71}) == reconcile.StateReady &&
			h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 72}) == reconcile.StateReady
	})
	require.Equal(t, polls+1, h.slurm.Lists(), "one poll, the one the retune asked for")
	require.Equal(t, time.Hour, c.Tuning().PollInterval, "a zero poll interval keeps the current one")
	require.ErrorContains(t, c.Retune(Tuning{Lookahead: reconcile.Lookahead{PerPool: -1}}), "look-ahead of -1 per pool")
}

// /metrics is served on its own listener, not by the hook API; both answer the probes.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c, _ := h.startController("a", Config{})
	get := func(addr net.Addr, path string) (int, string) {
		resp, err := http.Get("http://" + addr.String() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	eventually(t, 10*time.Second, "metrics served", func() bool {
		code, body := get(c.MetricsListener.Addr(), "/metrics")
		return code == http.StatusOK && strings.Contains(body, "juice_slurm_leader 1")
	})
	code, _ := get(c.Listener.Addr(), "/metrics")
	require.Equal(t, http.StatusNotFound, code, "the hook API does not serve /metrics")
	for _, ln := range []net.Listener{c.Listener, c.MetricsListener} {
		for _, p := range []string{"/healthz", "/readyz"} {
			code, body := get(ln.Addr(), p)
			require.Equal(t, http.StatusOK, code, "%s%s: %s", ln.Addr(), p, body)
		}
	}
}

func TestMetricsAddrIsTheHookPortPlus1000(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:7171": "127.0.0.1:8171", "[::1]:7171": "[::1]:8171",
		":7171": ":8171", "127.0.0.1:0": "127.0.0.1:0"} {
		got, err := MetricsAddr(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := MetricsAddr("127.0.0.1:65000")
	require.ErrorContains(t, err, `port "65000" has no metrics port 1000 above it`)
	_, err = MetricsAddr("localhost")
	require.ErrorContains(t, err, `hook address "localhost"`)
}
