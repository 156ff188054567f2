package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/juicefake"
	"github.com/juice-slurm/juice-slurm/reconcile/memstore"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// These tests drive the Reconciler against the in-memory store and the fake Juice Controller: one pass at a time,
// with no service. The controller package's tests drive it against PostgreSQL and the simulator.

const (
	pool      = "test"
	agentAddr = "agent-1.sim:43210"
	waitPoll  = time.Second
	readyPoll = 30 * time.Second
)

var clusterKey = []byte("0123456789abcdef0123456789abcdef")

type world struct {
	t     *testing.T
	store *memstore.Store
	juice *juicefake.Juice
	rc    *reconcile.Reconciler
	now   time.Time
	ready []uuid.UUID // what OnReady heard
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, store: &memstore.Store{}, juice: &juicefake.Juice{}, now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	w.store.Now = func() time.Time { return w.now }
	w.juice.AddAgent(pool, reconcile.Agent{ID: "a1", Address: agentAddr, State: "active", Active: true})
	w.rc = &reconcile.Reconciler{Store: w.store, Juice: w.juice, Key: session.StaticKey(clusterKey), Log: testr.New(t),
		WaitPoll: waitPoll, ReadyCheck: readyPoll, Now: func() time.Time { return w.now },
		OnReady: func(r *reconcile.Reservation) { w.ready = append(w.ready, r.ID) }}
	return w
}

// add stores a reservation of job 7 asking 2 GPUs of the pool, wanted, in state, as changed by each of with.
func (w *world) add(state reconcile.State, with ...func(*reconcile.Reservation)) reconcile.Reservation {
	r := reconcile.Reservation{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: 7},
		Request: request.Request{Pool: pool, GPUs: 2}, UserName: "alice",
		Spec: reconcile.Spec{Wanted: true}, Status: reconcile.Status{State: state, Version: 1}}
	if state != reconcile.StatePending {
		r.Status.Requested = true
	}
	if state == reconcile.StateReady {
		r.Status.SealedJobID = r.Run.JobID // sealed for its job: nothing to seal again
	}
	for _, f := range with {
		f(&r)
	}
	w.store.Put(r)
	return r
}

// onSession books a session under the reservation's key, active on the agent, as its status's session.
func (w *world) onSession(r *reconcile.Reservation) {
	r.Status.SessionID = w.juice.Book(r.ID, r.Request)
	w.juice.Activate(r.Status.SessionID, "a1", nil)
	r.Status.AgentAddress = agentAddr
}

func (w *world) pass(id uuid.UUID) (reconcile.Result, error) {
	return w.rc.Reconcile(context.Background(), id)
}

func (w *world) get(id uuid.UUID) reconcile.Reservation {
	r, ok := w.store.Reservation(id)
	require.True(w.t, ok, "reservation %s", id)
	return r
}

// passFails runs a pass over id, which must end the run failed for why (part of its FailReason).
func (w *world) passFails(id uuid.UUID, why string) reconcile.Reservation {
	w.t.Helper()
	_, err := w.pass(id)
	require.NoError(w.t, err)
	got := w.get(id)
	assert.Equal(w.t, reconcile.StateFailed, got.Status.State)
	assert.Contains(w.t, got.Status.FailReason, why)
	return got
}

// history is the reservation's transitions as "from>to:event".
func (w *world) history(id uuid.UUID) []string {
	var out []string
	for _, t := range w.store.Events(id) {
		out = append(out, fmt.Sprintf("%s>%s:%s", t.From, t.To, t.Event))
	}
	return out
}

func TestPendingCommitsTheIntentBeforeAskingThenWaits(t *testing.T) {
	w := newWorld(t)
	r := w.add(reconcile.StatePending)
	var atAsk reconcile.Reservation
	w.rc.Juice = juicefake.Intercept(w.juice, juicefake.Funcs{
		RequestSession: func(ctx context.Context, next reconcile.Juice, key uuid.UUID, req request.Request) (string, error) {
			atAsk = w.get(key) // what a crash at this moment would leave
			return next.RequestSession(ctx, key, req)
		}})

	res, err := w.pass(r.ID)
	require.NoError(t, err)

	assert.Equal(t, reconcile.StateRequesting, atAsk.Status.State, "the intent is committed before the controller is asked")
	assert.True(t, atAsk.Status.Requested)
	got := w.get(r.ID)
	assert.Equal(t, reconcile.StateWaiting, got.Status.State)
	sessions := w.juice.Sessions(r.ID)
	require.Len(t, sessions, 1, "one session, under the reservation's id as its key")
	assert.Equal(t, r.Request, sessions[0].Request)
	assert.Equal(t, sessions[0].ID, got.Status.SessionID)
	assert.False(t, got.Status.MaybeOrphans, "a session got on the first request is its key's only one")
	assert.Equal(t, []string{"pending>requesting:request", "requesting>waiting:queued"}, w.history(r.ID))
	assert.Equal(t, int64(3), got.Status.Version, "two writes: the intent, then the request's answer with the first look")
	assert.Equal(t, waitPoll, res.RequeueAfter, "a queued session is looked at again after WaitPoll")
	assert.Zero(t, w.juice.Calls().Walks, "a first request needs no look for an earlier one")
}

func TestRequestingAdoptsTheSessionOfALostAnswerByKey(t *testing.T) {
	w := newWorld(t)
	r := w.add(reconcile.StatePending)
	lost := errors.New("read tcp: connection reset by peer")
	w.rc.Juice = juicefake.Intercept(w.juice, juicefake.Funcs{
		RequestSession: func(ctx context.Context, next reconcile.Juice, key uuid.UUID, req request.Request) (string, error) {
			_, _ = next.RequestSession(ctx, key, req) // booked at the controller; the answer never comes back
			return "", lost
		}})

	_, err := w.pass(r.ID)
	require.ErrorIs(t, err, lost)
	assert.Equal(t, reconcile.StateRequesting, w.get(r.ID).Status.State, "the intent stands")
	sessions := w.juice.Sessions(r.ID)
	require.Len(t, sessions, 1)
	w.juice.Place(sessions[0].ID, "a1")

	w.rc.Juice = w.juice
	_, err = w.pass(r.ID)
	require.NoError(t, err)
	got := w.get(r.ID)
	assert.Equal(t, reconcile.StateWaiting, got.Status.State)
	assert.Equal(t, sessions[0].ID, got.Status.SessionID, "the session booked by the lost request is adopted")
	assert.True(t, got.Status.MaybeOrphans)
	assert.Contains(t, got.Status.Reason, "by the run's key")
	assert.Equal(t, 1, w.juice.Calls().Requests, "no second session is asked for")
}

func TestRequestingKeepsOneSessionOfTheKeyAndCancelsItsTwin(t *testing.T) {
	w := newWorld(t)
	r := w.add(reconcile.StateRequesting)
	first, twin := w.juice.Book(r.ID, r.Request), w.juice.Book(r.ID, r.Request)
	w.juice.Place(first, "a1")
	w.juice.Activate(twin, "a1", nil)

	_, err := w.pass(r.ID)
	require.NoError(t, err)
	got := w.get(r.ID)
	assert.Equal(t, first, got.Status.SessionID)
	assert.Equal(t, []string{twin}, w.juice.Calls().Cancelled)
	assert.Zero(t, w.juice.Calls().Requests)
}

func TestACrashAfterTheIntentAsksOnTheNextPass(t *testing.T) {
	w := newWorld(t)
	r := w.add(reconcile.StatePending)
	crash := errors.New("the process died after its write")
	w.rc.Store = memstore.Intercept(w.store, memstore.Funcs{
		SaveStatus: func(ctx context.Context, next reconcile.Store, r *reconcile.Reservation, ts ...reconcile.Transition) error {
			if err := next.SaveStatus(ctx, r, ts...); err != nil {
				return err
			}
			return crash
		}})

	_, err := w.pass(r.ID)
	require.ErrorIs(t, err, crash)
	assert.Equal(t, reconcile.StateRequesting, w.get(r.ID).Status.State)
	assert.Zero(t, w.juice.Calls().Requests, "nothing is asked once a write fails")

	w.rc.Store = w.store
	_, err = w.pass(r.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateWaiting, w.get(r.ID).Status.State)
	calls := w.juice.Calls()
	assert.Equal(t, 1, calls.Walks, "a request that may have been sent is looked for first")
	assert.Equal(t, 1, calls.Requests)
}

func TestWaitingBecomesReadySealingWhatWasAsked(t *testing.T) {
	w := newWorld(t)
	r := w.add(reconcile.StateWaiting, func(r *reconcile.Reservation) {
		r.Status.SessionID = w.juice.Book(r.ID, r.Request)
	})
	w.juice.Activate(r.Status.SessionID, "a1", []int{2, 5}) // what the port found to serve 2 GPUs

	res, err := w.pass(r.ID)
	require.NoError(t, err)
	got := w.get(r.ID)
	require.Equal(t, reconcile.StateReady, got.Status.State)
	assert.Equal(t, agentAddr, got.Status.AgentAddress)
	assert.Equal(t, w.now, got.Status.ReadyAt)
	assert.Equal(t, []uuid.UUID{r.ID}, w.ready)
	assert.Equal(t, readyPoll, res.RequeueAfter)
	env := openSealed(t, got, 7)
	assert.Equal(t, r.Status.SessionID, env["JUICE_SESSION_ID"])
	assert.Equal(t, agentAddr, env["JUICE_AGENT_ADDRESS"])
	assert.Equal(t, "2,5", env["JUICE_GPUS"])
}

func openSealed(t *testing.T, r reconcile.Reservation, job uint32) map[string]string {
	t.Helper()
	require.NotEmpty(t, r.Status.Sealed)
	b := r.Run.Binding()
	b.JobID, b.Reservation = job, r.ID
	vars, err := session.Open(r.Status.Sealed, b, clusterKey)
	require.NoError(t, err)
	env := map[string]string{}
	for _, v := range vars {
		env[v.Name] = v.Value
	}
	return env
}

func TestWaitingOnAGrantThatIsNotWhatWasAskedSaysSoOnce(t *testing.T) {
	w := newWorld(t)
	r := w.add(reconcile.StateWaiting, w.onSession)
	w.juice.Unfit(r.Status.SessionID, "session gives 1 GPU(s) for 2 asked")

	res, err := w.pass(r.ID)
	require.NoError(t, err)
	got := w.get(r.ID)
	assert.Equal(t, reconcile.StateWaiting, got.Status.State, "not ready on a grant that does not serve the request")
	assert.Equal(t, "not ready: session gives 1 GPU(s) for 2 asked", got.Status.Reason)
	assert.Equal(t, waitPoll, res.RequeueAfter)
	assert.Empty(t, got.Status.Sealed)

	_, err = w.pass(r.ID)
	require.NoError(t, err)
	assert.Equal(t, got.Status.Version, w.get(r.ID).Status.Version, "the same reason is not written again")
}

func TestWaitingOnAnAssignedSessionLooksSooner(t *testing.T) {
	w := newWorld(t)
	r := w.add(reconcile.StateWaiting, func(r *reconcile.Reservation) { r.Status.SessionID = w.juice.Book(r.ID, r.Request) })
	w.juice.Place(r.Status.SessionID, "a1")

	res, err := w.pass(r.ID)
	require.NoError(t, err)
	assert.Equal(t, waitPoll/5, res.RequeueAfter)
	assert.Equal(t, int64(1), w.get(r.ID).Status.Version, "nothing to write")
}

// A started job whose session is queued at the Juice Controller (no GPU free) takes the pool from the pending
// jobs reserved ahead: their reservations that hold or ask for a session let go, their runs not over (reserved
// again when their turn comes); a pending job's reservation not yet asked, another pool's, and a started job's
// are left alone. Neither a pending job's queued session, nor a started job's session on its way, nor one queued
// for less than QueueGrace (the Juice Controller's scheduler has not looked at it yet) yields anything.
func TestAStartedRunQueuedTakesThePoolFromPendingOnes(t *testing.T) {
	w := newWorld(t)
	job := func(id uint32, state string) func(*reconcile.Reservation) {
		return func(r *reconcile.Reservation) { r.Run.JobID, r.Spec.JobState = id, state }
	}
	booked := func(r *reconcile.Reservation) { r.Status.SessionID = w.juice.Book(r.ID, r.Request) }
	started := w.add(reconcile.StateWaiting, job(10, "CONFIGURING"), booked)
	aheadReady := w.add(reconcile.StateReady, job(11, "PENDING"), w.onSession)
	aheadQueued := w.add(reconcile.StateWaiting, job(12, "PENDING"), booked)
	notAsked := w.add(reconcile.StatePending, job(13, "PENDING"))
	otherPool := w.add(reconcile.StateReady, job(14, "PENDING"), w.onSession, func(r *reconcile.Reservation) { r.Request.Pool = "other" })
	running := w.add(reconcile.StateReady, job(15, "RUNNING"), w.onSession)

	// A pending job's queued session takes nothing from anyone.
	_, err := w.pass(aheadQueued.ID)
	require.NoError(t, err)
	require.True(t, w.get(aheadReady.ID).Spec.Wanted)

	// Nor does a started job's session on its way (placed on an agent).
	w.juice.Place(started.Status.SessionID, "a1")
	_, err = w.pass(started.ID)
	require.NoError(t, err)
	require.True(t, w.get(aheadReady.ID).Spec.Wanted)

	// Only just queued (moved to waiting now): the Juice Controller's scheduler has not looked at it yet, so
	// nothing says the pool has no GPU for it.
	started = w.add(reconcile.StateWaiting, job(16, "RUNNING"), booked,
		func(r *reconcile.Reservation) { r.Status.UpdatedAt = w.now })
	_, err = w.pass(started.ID)
	require.NoError(t, err)
	require.True(t, w.get(aheadReady.ID).Spec.Wanted, "a session queued for less than QueueGrace takes nothing")
	w.now = w.now.Add(reconcile.QueueGrace - time.Millisecond)
	_, err = w.pass(started.ID)
	require.NoError(t, err)
	require.True(t, w.get(aheadReady.ID).Spec.Wanted, "a session queued for less than QueueGrace takes nothing")

	// Queued for QueueGrace: the pool has no GPU for it.
	w.now = w.now.Add(time.Millisecond)
	res, err := w.pass(started.ID)
	require.NoError(t, err)
	assert.Equal(t, waitPoll, res.RequeueAfter, "looked at again as any queued session")
	for _, id := range []uuid.UUID{aheadReady.ID, aheadQueued.ID} {
		got := w.get(id)
		assert.False(t, got.Spec.Wanted, "job %d", got.Run.JobID)
		assert.False(t, got.Spec.RunOver, "job %d: its run is reserved again when its turn comes", got.Run.JobID)
		assert.Equal(t, "yields pool test to job 16, which Slurm started and which waits for GPUs (reserved again when its turn comes)",
			got.Spec.WantReason)
	}
	for _, id := range []uuid.UUID{notAsked.ID, otherPool.ID, running.ID, started.ID} {
		assert.True(t, w.get(id).Spec.Wanted, "job %d keeps its reservation", w.get(id).Run.JobID)
	}

	// A yielded reservation is let go on its next pass, and its run may be reserved again.
	_, err = w.pass(aheadReady.ID)
	require.NoError(t, err)
	got := w.get(aheadReady.ID)
	assert.Equal(t, reconcile.StateReleased, got.Status.State)
	assert.Equal(t, reconcile.Free, reconcile.Reservable([]reconcile.Tracked{{State: got.Status.State, RunOver: got.Spec.RunOver}}))
}

func TestWaitingOnASessionTheControllerEndedFailsTheRun(t *testing.T) {
	for name, end := range map[string]struct {
		do  func(j *juicefake.Juice, id string)
		why string
	}{
		"ended":   {(*juicefake.Juice).End, "ended session s1 (closed) before it became active"},
		"unknown": {(*juicefake.Juice).Forget, "no longer knows session s1"},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			r := w.add(reconcile.StateWaiting, func(r *reconcile.Reservation) { r.Status.SessionID = w.juice.Book(r.ID, r.Request) })
			end.do(w.juice, r.Status.SessionID)

			w.passFails(r.ID, end.why)
			assert.Equal(t, []string{"waiting>releasing:closed", "releasing>failed:closed"}, w.history(r.ID))
		})
	}
}

func TestReadyArrayElementIsSealedAgainForItsJob(t *testing.T) {
	w := newWorld(t)
	r := w.add(reconcile.StateReady, w.onSession, func(r *reconcile.Reservation) {
		r.Run = reconcile.RunID{Cluster: "c1", ArrayJobID: 40, ArrayTaskID: 3} // reserved ahead: no job id yet
		r.Status.SealedJobID = 0
		b := r.Run.Binding()
		b.Reservation = r.ID
		sealed, err := session.Seal(clusterKey, b, session.Env(r.Request, session.Grant{SessionID: r.Status.SessionID, Address: agentAddr, GPUs: []int{0, 1}}))
		require.NoError(t, err)
		r.Status.Sealed = sealed
	})
	w.store.Update(r.ID, func(r *reconcile.Reservation) { r.Run = r.Run.Bound(44) }) // slurmctld made the element job 44

	_, err := w.pass(r.ID)
	require.NoError(t, err)
	got := w.get(r.ID)
	assert.Equal(t, reconcile.StateReady, got.Status.State)
	assert.Equal(t, uint32(44), got.Status.SealedJobID)
	assert.True(t, got.SealedFor(), "the prolog of job 44 may be handed the file")
	env := openSealed(t, got, 44)
	assert.Equal(t, r.Status.SessionID, env["JUICE_SESSION_ID"])
	assert.Equal(t, "0,1", env["JUICE_GPUS"], "the environment sealed before is sealed again as it was")
	assert.Equal(t, []string{"ready>ready:bound"}, w.history(r.ID))
	assert.Zero(t, w.juice.Calls().Requests+w.juice.Calls().Cancels, "the controller is not asked")
}

func TestReadyCheck(t *testing.T) {
	w := newWorld(t)
	alive := w.add(reconcile.StateReady, w.onSession)
	res, err := w.pass(alive.ID)
	require.NoError(t, err)
	assert.Equal(t, readyPoll, res.RequeueAfter)
	assert.Equal(t, int64(1), w.get(alive.ID).Status.Version)

	ended := w.add(reconcile.StateReady, w.onSession)
	w.juice.End(ended.Status.SessionID)
	w.passFails(ended.ID, "ended session "+ended.Status.SessionID+" while the job held it")
}

func TestReadyOnAnAgentThatIsNoLongerActiveIsLost(t *testing.T) {
	w := newWorld(t)
	w.rc.Liveness = &reconcile.Liveness{Juice: w.juice, Period: time.Minute, Now: func() time.Time { return w.now }}
	r := w.add(reconcile.StateReady, w.onSession, func(r *reconcile.Reservation) { r.Status.ReadyAt = w.now.Add(-time.Hour) })
	res, err := w.pass(r.ID)
	require.NoError(t, err)
	assert.Equal(t, readyPoll, res.RequeueAfter, "alive in the walk")
	assert.Zero(t, w.juice.Calls().Gets, "the walk says it, not a read of the session")

	w.juice.SetAgent(pool, "a1", "missing")
	w.now = w.now.Add(2 * time.Minute) // the next period's walk
	w.passFails(r.ID, "lost: session "+r.Status.SessionID+" is on agent a1")
}

// A released run gives its pool's GPUs back: OnFreed hears of the pool, and the queued runs it names to Hasten are
// looked at as if assigned until about one scheduler tick has passed; a queued run not named is not.
func TestAReleaseHastensThePoolsQueuedRuns(t *testing.T) {
	w := newWorld(t)
	queued := w.add(reconcile.StateWaiting, func(r *reconcile.Reservation) { r.Status.SessionID = w.juice.Book(r.ID, r.Request) })
	other := w.add(reconcile.StateWaiting, func(r *reconcile.Reservation) { r.Status.SessionID = w.juice.Book(r.ID, r.Request) })
	var freed []string
	w.rc.OnFreed = func(_ context.Context, p string) {
		freed = append(freed, p)
		w.rc.Hasten(queued.ID)
	}
	res, err := w.pass(queued.ID)
	require.NoError(t, err)
	assert.Equal(t, waitPoll, res.RequeueAfter, "no release yet")

	done := w.add(reconcile.StateReleasing, w.onSession)
	_, err = w.pass(done.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.StateReleased, w.get(done.ID).Status.State)
	assert.Equal(t, []string{pool}, freed)

	res, err = w.pass(queued.ID)
	require.NoError(t, err)
	assert.Equal(t, waitPoll/5, res.RequeueAfter, "its pool has GPUs back: looked at sooner")
	res, err = w.pass(other.ID)
	require.NoError(t, err)
	assert.Equal(t, waitPoll, res.RequeueAfter, "not named: as any queued session")

	w.now = w.now.Add(waitPoll)
	res, err = w.pass(queued.ID)
	require.NoError(t, err)
	assert.Equal(t, waitPoll, res.RequeueAfter, "a tick later, as any queued session")
}

func TestReleasing(t *testing.T) {
	t.Run("cancels its session", func(t *testing.T) {
		w := newWorld(t)
		r := w.add(reconcile.StateReleasing, w.onSession)
		_, err := w.pass(r.ID)
		require.NoError(t, err)
		got := w.get(r.ID)
		assert.Equal(t, reconcile.StateReleased, got.Status.State)
		assert.Equal(t, "session "+r.Status.SessionID+" cancelled at the Juice Controller", got.Status.Reason)
		assert.Equal(t, []string{r.Status.SessionID}, w.juice.Calls().Cancelled)
	})
	t.Run("waits for the agent to hold its session", func(t *testing.T) {
		w := newWorld(t)
		r := w.add(reconcile.StateReleasing, func(r *reconcile.Reservation) { r.Status.SessionID = w.juice.Book(r.ID, r.Request) })
		w.juice.Place(r.Status.SessionID, "a1")
		res, err := w.pass(r.ID)
		require.NoError(t, err)
		assert.Equal(t, waitPoll, res.RequeueAfter)
		assert.Equal(t, int64(1), w.get(r.ID).Status.Version, "still releasing, nothing written")

		w.juice.Activate(r.Status.SessionID, "a1", nil)
		_, err = w.pass(r.ID)
		require.NoError(t, err)
		assert.Equal(t, reconcile.StateReleased, w.get(r.ID).Status.State)
	})
	t.Run("finds by key a session whose answer was lost", func(t *testing.T) {
		w := newWorld(t)
		r := w.add(reconcile.StateReleasing, func(r *reconcile.Reservation) { r.Status.MaybeOrphans = true })
		lost := w.juice.Book(r.ID, r.Request)
		w.juice.Activate(lost, "a1", nil)
		_, err := w.pass(r.ID)
		require.NoError(t, err)
		got := w.get(r.ID)
		assert.Equal(t, reconcile.StateReleased, got.Status.State)
		assert.Equal(t, []string{lost}, w.juice.Calls().Cancelled)
		assert.Equal(t, "1 session(s) found by the run's key cancelled at the Juice Controller", got.Status.Reason)
	})
}

func TestAPolicyBreachFailsTheRunWithoutAsking(t *testing.T) {
	w := newWorld(t)
	w.rc.Policy = &policy.Policy{MaxGPUs: 1}
	r := w.add(reconcile.StatePending)
	w.passFails(r.ID, "refused by the site policy: 2 GPUs asked for, at most 1 allowed per job")
	assert.Equal(t, []string{"pending>failed:fail"}, w.history(r.ID))
	assert.Zero(t, w.juice.Calls().Requests)
}

func TestAUserAtTheCapWaitsPending(t *testing.T) {
	w := newWorld(t)
	w.rc.Policy = &policy.Policy{PoolLimits: map[string]*policy.PoolLimits{pool: {MaxGPUsPerUser: 3}}}
	holding := w.add(reconcile.StateReady, w.onSession) // alice's 2 GPUs
	w.add(reconcile.StateReleased, func(r *reconcile.Reservation) { r.Request.GPUs = 8 })
	w.add(reconcile.StateReady, func(r *reconcile.Reservation) { r.UserName = "bob" })
	r := w.add(reconcile.StatePending)

	res, err := w.pass(r.ID)
	require.NoError(t, err)
	got := w.get(r.ID)
	assert.Equal(t, reconcile.StatePending, got.Status.State)
	assert.True(t, policy.IsWait(got.Status.Reason), got.Status.Reason)
	assert.Contains(t, got.Status.Reason, "2 held or being got, 2 more asked for, at most 3")
	assert.Equal(t, waitPoll, res.RequeueAfter)
	assert.Zero(t, w.juice.Calls().Requests)
	_, err = w.pass(r.ID)
	require.NoError(t, err)
	assert.Equal(t, got.Status.Version, w.get(r.ID).Status.Version, "the same wait is not written again")

	h := w.get(holding.ID)
	h.Status.State = reconcile.StateReleasing
	w.store.Put(h)
	_, err = w.pass(r.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StatePending, w.get(r.ID).Status.State, "a run still releasing holds its GPUs")

	h.Status.State = reconcile.StateReleased
	w.store.Put(h)
	_, err = w.pass(r.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateWaiting, w.get(r.ID).Status.State, "asked once the user's GPUs are let go")
}

func TestAConflictingWriteStopsThePassBeforeAsking(t *testing.T) {
	w := newWorld(t)
	r := w.add(reconcile.StatePending)
	w.rc.Store = memstore.Intercept(w.store, memstore.Funcs{
		SaveStatus: func(ctx context.Context, next reconcile.Store, r *reconcile.Reservation, ts ...reconcile.Transition) error {
			other, err := next.Get(ctx, r.ID) // another pass wrote first
			require.NoError(t, err)
			tr, err := reconcile.Apply(&other, reconcile.EventWait, "another pass", w.now)
			require.NoError(t, err)
			require.NoError(t, next.SaveStatus(ctx, &other, tr))
			return next.SaveStatus(ctx, r, ts...)
		}})

	_, err := w.pass(r.ID)
	require.ErrorIs(t, err, reconcile.ErrConflict)
	got := w.get(r.ID)
	assert.Equal(t, reconcile.StatePending, got.Status.State)
	assert.Equal(t, "another pass", got.Status.Reason, "the other write stands")
	assert.Equal(t, []string{"pending>pending:wait"}, w.history(r.ID))
	assert.Zero(t, w.juice.Calls().Requests, "no intent committed, nothing asked")
}

func TestATransientJuiceErrorLeavesTheStateForTheNextTry(t *testing.T) {
	down := errors.New("juice: controller unavailable")
	failing := juicefake.Funcs{
		RequestSession: func(context.Context, reconcile.Juice, uuid.UUID, request.Request) (string, error) { return "", down },
		GetSession: func(context.Context, reconcile.Juice, string, request.Request) (reconcile.Session, error) {
			return reconcile.Session{}, down
		},
		CancelSession: func(context.Context, reconcile.Juice, string) error { return down },
		WalkPool: func(context.Context, reconcile.Juice, string, time.Time) (reconcile.PoolView, error) {
			return nil, down
		},
	}
	for _, state := range []reconcile.State{reconcile.StateRequesting, reconcile.StateWaiting, reconcile.StateReady, reconcile.StateReleasing} {
		t.Run(string(state), func(t *testing.T) {
			w := newWorld(t)
			r := w.add(state, func(r *reconcile.Reservation) {
				if state != reconcile.StateRequesting {
					w.onSession(r)
				}
			})
			w.rc.Juice = juicefake.Intercept(w.juice, failing)

			_, err := w.pass(r.ID)
			require.ErrorIs(t, err, down, "an error: the work queue tries again, backing off")
			got := w.get(r.ID)
			assert.Equal(t, state, got.Status.State)
			assert.Equal(t, int64(1), got.Status.Version, "nothing written")
		})
	}
}

func TestAnUnwantedRunIsLetGoFromEveryServingState(t *testing.T) {
	for _, state := range []reconcile.State{reconcile.StatePending, reconcile.StateRequesting, reconcile.StateWaiting, reconcile.StateReady} {
		t.Run(string(state), func(t *testing.T) {
			w := newWorld(t)
			r := w.add(state, func(r *reconcile.Reservation) {
				r.Spec.Wanted, r.Spec.WantReason = false, "job 7 ended"
				if state == reconcile.StateWaiting || state == reconcile.StateReady {
					w.onSession(r)
				}
			})

			_, err := w.pass(r.ID)
			require.NoError(t, err)
			got := w.get(r.ID)
			assert.Equal(t, reconcile.StateReleased, got.Status.State)
			require.NotEmpty(t, w.history(r.ID))
			first := w.store.Events(r.ID)[0]
			assert.Equal(t, reconcile.EventUnwanted, first.Event)
			assert.Equal(t, "job 7 ended", first.Reason)
			if r.Status.SessionID != "" {
				assert.Equal(t, []string{r.Status.SessionID}, w.juice.Calls().Cancelled)
			}
			assert.Zero(t, w.juice.Calls().Requests)
		})
	}
}

func TestARequestThatCanNeverBeServedFails(t *testing.T) {
	for name, kind := range map[string]error{"never fits": reconcile.ErrNeverFits, "refused": reconcile.ErrRefused} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			r := w.add(reconcile.StatePending)
			w.rc.Juice = juicefake.Intercept(w.juice, juicefake.Funcs{
				RequestSession: func(context.Context, reconcile.Juice, uuid.UUID, request.Request) (string, error) {
					return "", fmt.Errorf("POST /v1/request/session: %w", kind)
				}})
			got := w.passFails(r.ID, "")
			assert.True(t, strings.HasSuffix(got.Status.FailReason, "POST /v1/request/session: "+kind.Error()), got.Status.FailReason)
			assert.Equal(t, []string{"pending>requesting:request", "requesting>releasing:fail", "releasing>failed:closed"}, w.history(r.ID))
		})
	}
}

func TestReadyOnAnAgentMissingFromTheWalk(t *testing.T) {
	for name, partial := range map[string]bool{"whole walk": false, "listing cut short": true} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			w.juice.Partial = partial
			w.rc.Liveness = &reconcile.Liveness{Juice: w.juice, Period: time.Minute, Now: func() time.Time { return w.now }}
			r := w.add(reconcile.StateReady, w.onSession, func(r *reconcile.Reservation) {
				r.Status.AgentAddress = "gone.sim:43210" // its agent left the pool, and the walk shows it nowhere
				r.Status.ReadyAt = w.now.Add(-time.Hour)
			})
			// An agent at that address in another pool is not one of this pool's.
			w.juice.AddAgent("elsewhere", reconcile.Agent{ID: "a9", Address: "gone.sim:43210", State: "active", Active: true})
			w.juice.Forget(r.Status.SessionID)

			_, err := w.pass(r.ID)
			require.NoError(t, err)
			got := w.get(r.ID)
			if partial {
				// The agent may be on a page the listing did not show: the session itself is asked about.
				assert.Equal(t, 1, w.juice.Calls().Gets)
				assert.Contains(t, got.Status.FailReason, "ended session "+r.Status.SessionID)
				return
			}
			assert.Zero(t, w.juice.Calls().Gets)
			assert.Contains(t, got.Status.FailReason, "lost: the agent at gone.sim:43210 holding session "+r.Status.SessionID+" is not an active agent of pool test")
		})
	}
}

func TestSuspectsAreTheReadyRunsNotPlainlyAlive(t *testing.T) {
	w := newWorld(t)
	w.juice.AddAgent(pool, reconcile.Agent{ID: "a2", Address: "agent-2.sim:43210", State: "active", Active: true})
	l := &reconcile.Liveness{Juice: w.juice, Period: time.Minute, Now: func() time.Time { return w.now }}
	run := func(agent string, ready time.Time) reconcile.ReadyRun {
		id := uuid.New()
		sid := w.juice.Book(id, request.Request{Pool: pool, GPUs: 1})
		w.juice.Activate(sid, agent, nil)
		return reconcile.ReadyRun{ID: id, Pool: pool, SessionID: sid, ReadyAt: ready}
	}
	before := w.now.Add(-time.Minute)
	alive, ended, onMissing, gone, late := run("a1", before), run("a1", before), run("a2", before), run("a1", before), run("a1", w.now.Add(time.Second))
	w.juice.End(ended.SessionID)
	w.juice.SetAgent(pool, "a2", "missing")
	w.juice.Forget(gone.SessionID)
	w.juice.Forget(late.SessionID) // ready after the walk: left for the next one

	suspects, err := l.Suspects(context.Background(), []reconcile.ReadyRun{alive, ended, onMissing, gone, late})
	require.NoError(t, err)
	assert.ElementsMatch(t, []uuid.UUID{ended.ID, onMissing.ID, gone.ID}, suspects)

	down := errors.New("juice: controller unavailable")
	l = &reconcile.Liveness{Juice: juicefake.Intercept(w.juice, juicefake.Funcs{
		WalkPool: func(context.Context, reconcile.Juice, string, time.Time) (reconcile.PoolView, error) {
			return nil, down
		},
	})}
	suspects, err = l.Suspects(context.Background(), []reconcile.ReadyRun{alive, ended})
	require.ErrorIs(t, err, down)
	assert.Empty(t, suspects, "a pool whose walk failed is checked at the next period, not handed over whole")
}
