package reconcile_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/memstore"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// handoffWorld is a world whose pool has hand-off on, with a run of job 7 ready on its session (sealed for it by a
// pass, as in production) and the number of its followers Slurm shows pending.
type handoffWorld struct {
	*world
	giver     reconcile.Reservation
	followers int
}

func newHandoffWorld(t *testing.T) *handoffWorld {
	w := &handoffWorld{world: newWorld(t)}
	w.rc.Policy = &policy.Policy{PoolLimits: map[string]*policy.PoolLimits{pool: {Handoff: true}}}
	w.rc.Handoff = &reconcile.Handoff{Wait: 3 * time.Second, Followers: func(reconcile.Likeness) bool { return w.followers > 0 }}
	g := w.add(reconcile.StateWaiting, func(r *reconcile.Reservation) { r.Account = "physics" }, w.onSession)
	_, err := w.pass(g.ID)
	require.NoError(t, err)
	w.giver = w.get(g.ID)
	require.Equal(t, reconcile.StateReady, w.giver.Status.State)
	return w
}

// end has the giver's run end, as its epilog reports it, and runs a pass over it.
func (w *handoffWorld) end() reconcile.Result {
	w.t.Helper()
	w.store.Update(w.giver.ID, func(r *reconcile.Reservation) {
		r.Spec.Wanted, r.Spec.WantReason, r.Spec.RunOver = false, "job 7 ended", true
	})
	res, err := w.pass(w.giver.ID)
	require.NoError(w.t, err)
	return res
}

// next adds the run of job 8, alike to the giver (same user, account, request) unless changed by with, pending.
func (w *handoffWorld) next(with ...func(*reconcile.Reservation)) reconcile.Reservation {
	alike := func(r *reconcile.Reservation) { r.Run.JobID, r.Account, r.Spec.JobState = 8, "physics", "CONFIGURING" }
	return w.add(reconcile.StatePending, append([]func(*reconcile.Reservation){alike}, with...)...)
}

func TestAnEndedRunHandsItsSessionToALikeRunWaiting(t *testing.T) {
	w := newHandoffWorld(t)
	taker := w.next()
	sid := w.giver.Status.SessionID

	res := w.end()
	assert.Zero(t, res.RequeueAfter)
	g, got := w.get(w.giver.ID), w.get(taker.ID)
	assert.Equal(t, reconcile.StateReleased, g.Status.State)
	assert.Equal(t, []string{"waiting>ready:active", "ready>releasing:unwanted", "releasing>released:handed"}, w.history(g.ID))
	assert.Contains(t, g.Status.Reason, "session "+sid+" handed to job 8")

	require.Equal(t, reconcile.StateReady, got.Status.State)
	assert.Equal(t, []string{"pending>ready:taken"}, w.history(taker.ID))
	assert.Contains(t, got.Status.Reason, "session "+sid+" of job 7")
	assert.Equal(t, sid, got.Status.SessionID)
	assert.Equal(t, agentAddr, got.Status.AgentAddress)
	assert.Equal(t, w.now, got.Status.ReadyAt)
	assert.False(t, got.Status.Requested, "nothing was asked of the Juice Controller for it")
	env := openSealed(t, got, 8)
	assert.Equal(t, sid, env["JUICE_SESSION_ID"])
	b := got.Run.Binding()
	b.JobID, b.Reservation = 7, w.giver.ID
	_, err := session.Open(got.Status.Sealed, b, clusterKey)
	assert.Error(t, err, "the file is sealed for the run that took it, not for the one that ended")

	calls := w.juice.Calls()
	assert.Empty(t, calls.Cancelled, "the session is not cancelled")
	assert.Equal(t, 0, calls.Requests, "and no new one asked for")
	assert.Contains(t, w.ready, taker.ID, "the taker is counted ready")

	// The taker's run ends in turn, nobody after it: its session is cancelled then.
	w.store.Update(taker.ID, func(r *reconcile.Reservation) { r.Spec.Wanted, r.Spec.RunOver = false, true })
	_, err = w.pass(taker.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateReleased, w.get(taker.ID).Status.State)
	assert.Equal(t, []string{sid}, w.juice.Calls().Cancelled)
}

// A session goes only to the same user's run of the same account and request, in a pool with hand-off on, from a
// run that is over and did not fail; otherwise it is cancelled and the other run asks for its own.
func TestHandoffNeverCrossesUsersAccountsOrRequests(t *testing.T) {
	for _, tc := range []struct {
		name  string
		taker func(*reconcile.Reservation)
		world func(*handoffWorld)
	}{
		{name: "another user", taker: func(r *reconcile.Reservation) { r.UserName = "bob" }},
		{name: "another account", taker: func(r *reconcile.Reservation) { r.Account = "chem" }},
		{name: "another request", taker: func(r *reconcile.Reservation) { r.Request.GPUs = 1 }},
		{name: "a user Slurm did not name", taker: func(r *reconcile.Reservation) { r.UserName = "" },
			world: func(w *handoffWorld) {
				w.store.Update(w.giver.ID, func(r *reconcile.Reservation) { r.UserName = "" })
			}},
		{name: "a run that was not waiting", taker: func(r *reconcile.Reservation) { r.Spec.Wanted = false }},
		{name: "a pool without hand-off", world: func(w *handoffWorld) { w.rc.Policy = &policy.Policy{} }},
		{name: "no hand-off configured", world: func(w *handoffWorld) { w.rc.Handoff = nil }},
		{name: "a run an administrator released", world: func(w *handoffWorld) {
			w.store.Update(w.giver.ID, func(r *reconcile.Reservation) {
				r.Spec.Wanted, r.Spec.WantReason, r.Spec.RunOver = false, reconcile.AdminReleased, true
			})
			_, err := w.pass(w.giver.ID)
			require.NoError(w.t, err)
		}},
		{name: "a run let go only for now (held)", world: func(w *handoffWorld) {
			w.store.Update(w.giver.ID, func(r *reconcile.Reservation) { r.Spec.Wanted, r.Spec.WantReason = false, "held" })
			_, err := w.pass(w.giver.ID)
			require.NoError(w.t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newHandoffWorld(t)
			var with []func(*reconcile.Reservation)
			if tc.taker != nil {
				with = append(with, tc.taker)
			}
			taker := w.next(with...)
			if tc.world != nil {
				tc.world(w)
			}
			if w.get(w.giver.ID).Status.State != reconcile.StateReleased {
				w.end()
			}
			g := w.get(w.giver.ID)
			assert.Equal(t, reconcile.StateReleased, g.Status.State)
			assert.NotContains(t, w.history(g.ID), "releasing>released:handed")
			assert.Equal(t, []string{w.giver.Status.SessionID}, w.juice.Calls().Cancelled)
			assert.Equal(t, reconcile.StatePending, w.get(taker.ID).Status.State)
		})
	}
}

// A run whose session the Juice Controller ended never hands it on, even when it ended at once.
func TestALostSessionIsNotHandedOn(t *testing.T) {
	w := newHandoffWorld(t)
	taker := w.next()
	w.juice.End(w.giver.Status.SessionID)
	w.now = w.now.Add(readyPoll)
	_, err := w.pass(w.giver.ID)
	require.NoError(t, err)
	w.end()
	g := w.get(w.giver.ID)
	assert.Equal(t, reconcile.StateFailed, g.Status.State)
	assert.Equal(t, reconcile.StatePending, w.get(taker.ID).Status.State)
}

// With a like job pending in Slurm and no run for it yet, the ended run's session waits for one, at most Wait; a
// run that comes meanwhile waits for it instead of asking, and gets it.
func TestAnEndedRunsSessionWaitsForAFollower(t *testing.T) {
	w := newHandoffWorld(t)
	w.followers = 1
	res := w.end()
	assert.Equal(t, 100*time.Millisecond, res.RequeueAfter)
	assert.Equal(t, reconcile.StateReleasing, w.get(w.giver.ID).Status.State)
	assert.Empty(t, w.juice.Calls().Cancelled)

	w.now = w.now.Add(time.Second)
	taker := w.next()
	res, err := w.pass(taker.ID)
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, res.RequeueAfter, "it waits for the session lingering")
	assert.Equal(t, reconcile.StatePending, w.get(taker.ID).Status.State)
	assert.Equal(t, 0, w.juice.Calls().Requests)

	_, err = w.pass(w.giver.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateReleased, w.get(w.giver.ID).Status.State)
	got := w.get(taker.ID)
	assert.Equal(t, reconcile.StateReady, got.Status.State)
	assert.Equal(t, w.giver.Status.SessionID, got.Status.SessionID)
	assert.Empty(t, w.juice.Calls().Cancelled)
}

// The next job's prolog may come before the reconciler took up the end of the run before it: the new run waits for
// that run's session rather than ask for one.
func TestAPendingRunWaitsForARunWhoseEndIsNotTakenUpYet(t *testing.T) {
	w := newHandoffWorld(t)
	w.store.Update(w.giver.ID, func(r *reconcile.Reservation) { r.Spec.Wanted, r.Spec.RunOver = false, true })
	taker := w.next()
	res, err := w.pass(taker.ID)
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, res.RequeueAfter)
	assert.Equal(t, reconcile.StatePending, w.get(taker.ID).Status.State)
	assert.Equal(t, 0, w.juice.Calls().Requests)
	_, err = w.pass(w.giver.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateReady, w.get(taker.ID).Status.State)
	assert.Equal(t, w.giver.Status.SessionID, w.get(taker.ID).Status.SessionID)

	// A run still ready whose run is not over (held, say) is not waited for.
	w2 := newHandoffWorld(t)
	w2.store.Update(w2.giver.ID, func(r *reconcile.Reservation) { r.Spec.Wanted = false })
	taker = w2.next()
	_, err = w2.pass(taker.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateWaiting, w2.get(taker.ID).Status.State)
}

func TestAnEndedRunsSessionWaitsNoLongerThanWait(t *testing.T) {
	w := newHandoffWorld(t)
	w.followers = 1
	assert.NotZero(t, w.end().RequeueAfter)
	w.now = w.now.Add(3 * time.Second)
	_, err := w.pass(w.giver.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateReleased, w.get(w.giver.ID).Status.State)
	assert.Equal(t, []string{w.giver.Status.SessionID}, w.juice.Calls().Cancelled)

	// A run that comes after that asks for its own session.
	taker := w.next()
	_, err = w.pass(taker.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateWaiting, w.get(taker.ID).Status.State)
	assert.Equal(t, 1, w.juice.Calls().Requests)
}

// A like run that asked for its own session (reserved ahead) gets the GPUs from the Juice Controller's queue once
// the ended run's session is cancelled: the session does not wait for a run that is not coming for it.
// A like run Slurm started that waits with its own session still queued takes the ended run's session; its own is
// cancelled after (the giver's is not). Without this, a burst whose one prolog came early went on asking for good.
func TestAnEndedRunsSessionGoesToALikeStartedRunWaitingInTheQueue(t *testing.T) {
	w := newHandoffWorld(t)
	var own string
	taker := w.next(func(r *reconcile.Reservation) {
		own = w.juice.Book(r.ID, r.Request)
		r.Status.State, r.Status.Requested, r.Status.SessionID = reconcile.StateWaiting, true, own
	})
	assert.Zero(t, w.end().RequeueAfter)
	assert.Equal(t, reconcile.StateReleased, w.get(w.giver.ID).Status.State)
	got := w.get(taker.ID)
	assert.Equal(t, reconcile.StateReady, got.Status.State)
	assert.Equal(t, w.giver.Status.SessionID, got.Status.SessionID)
	assert.False(t, got.Status.MaybeOrphans, "its key names no other session once its own is cancelled")
	assert.Equal(t, []string{own}, w.juice.Calls().Cancelled, "its own queued session, not the one handed on")
	assert.Equal(t, []string{"waiting>ready:taken"}, w.history(taker.ID))
	assert.Contains(t, got.Status.Reason, "its own session "+own+", still queued, is cancelled")
}

// A like run whose own session an agent was given already is served by it shortly: it takes nothing. Nor does one
// whose job Slurm has not started (reserved ahead): the GPUs would wait on a job Slurm holds; and as its own session
// is still queued, the ended run's does not wait for a follower either: it is cancelled and the queue gets its GPUs.
func TestAnEndedRunsSessionIsNotHandedToARunItsOwnServes(t *testing.T) {
	for name, c := range map[string]struct {
		followers int
		with      func(w *handoffWorld, r *reconcile.Reservation)
	}{
		"its own placed": {0, func(w *handoffWorld, r *reconcile.Reservation) {
			r.Status.SessionID = w.juice.Book(r.ID, r.Request)
			w.juice.Place(r.Status.SessionID, "a1")
		}},
		"its job pending": {1, func(w *handoffWorld, r *reconcile.Reservation) {
			r.Status.SessionID, r.Spec.JobState = w.juice.Book(r.ID, r.Request), "PENDING"
		}},
	} {
		with := c.with
		t.Run(name, func(t *testing.T) {
			w := newHandoffWorld(t)
			w.followers = c.followers
			taker := w.next(func(r *reconcile.Reservation) {
				r.Status.State, r.Status.Requested = reconcile.StateWaiting, true
				with(w, r)
			})
			assert.Zero(t, w.end().RequeueAfter)
			assert.Equal(t, reconcile.StateReleased, w.get(w.giver.ID).Status.State)
			assert.Equal(t, reconcile.StateWaiting, w.get(taker.ID).Status.State)
			assert.Equal(t, []string{w.giver.Status.SessionID}, w.juice.Calls().Cancelled)
		})
	}
}

// A like run waiting for its own session, which an agent was given already, loses nothing while the ended run's
// session waits for a follower: it waits, and the next like job Slurm starts takes it. (An array whose elements
// each started while the one before still ran asked for a session per element from then on: bench-licenses.)
func TestAnEndedRunsSessionWaitsForAFollowerWhileALikeRunsOwnIsPlaced(t *testing.T) {
	w := newHandoffWorld(t)
	w.followers = 1
	placed := w.next(func(r *reconcile.Reservation) {
		r.Status.State, r.Status.Requested = reconcile.StateWaiting, true
		r.Status.SessionID = w.juice.Book(r.ID, r.Request)
		w.juice.Place(r.Status.SessionID, "a1")
	})
	assert.Equal(t, 100*time.Millisecond, w.end().RequeueAfter, "it waits for the follower")
	assert.Equal(t, reconcile.StateReleasing, w.get(w.giver.ID).Status.State)
	assert.Empty(t, w.juice.Calls().Cancelled)

	// The placed session comes up (a second later, in the simulator) and a follower starts.
	w.now = w.now.Add(time.Second)
	w.juice.Activate(placed.Status.SessionID, "a1", nil)
	_, err := w.pass(placed.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.StateReady, w.get(placed.ID).Status.State)
	follower := w.add(reconcile.StatePending, func(r *reconcile.Reservation) {
		r.Run.JobID, r.Account, r.Spec.JobState = 9, "physics", "CONFIGURING"
	})
	_, err = w.pass(w.giver.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateReleased, w.get(w.giver.ID).Status.State)
	assert.Equal(t, w.giver.Status.SessionID, w.get(follower.ID).Status.SessionID, "the follower took it")
	assert.Equal(t, placed.Status.SessionID, w.get(placed.ID).Status.SessionID, "the placed one kept its own")
	assert.Empty(t, w.juice.Calls().Cancelled)
}

func TestAnEndedRunWithoutFollowersCancelsAtOnce(t *testing.T) {
	w := newHandoffWorld(t)
	assert.Zero(t, w.end().RequeueAfter)
	assert.Equal(t, reconcile.StateReleased, w.get(w.giver.ID).Status.State)
	assert.Equal(t, []string{w.giver.Status.SessionID}, w.juice.Calls().Cancelled)
}

// A hand-off whose taker moved meanwhile (another worker asked for its session) writes neither run: the ended run's
// next pass finds no taker and cancels.
func TestAHandOverThatConflictsWritesNeither(t *testing.T) {
	w := newHandoffWorld(t)
	taker := w.next()
	w.rc.Store = memstore.Intercept(w.store, memstore.Funcs{
		HandOver: func(ctx context.Context, next reconcile.Store, g, tk *reconcile.Reservation, tg []reconcile.Transition, tt reconcile.Transition) error {
			moved := w.get(tk.ID)
			tr, err := reconcile.Apply(&moved, reconcile.EventRequest, "asking", w.now)
			require.NoError(t, err)
			require.NoError(t, next.SaveStatus(ctx, &moved, tr))
			return next.HandOver(ctx, g, tk, tg, tt)
		}})
	w.store.Update(w.giver.ID, func(r *reconcile.Reservation) { r.Spec.Wanted, r.Spec.RunOver = false, true })
	_, err := w.pass(w.giver.ID)
	require.ErrorIs(t, err, reconcile.ErrConflict)
	assert.Equal(t, reconcile.StateReleasing, w.get(w.giver.ID).Status.State)
	assert.Equal(t, reconcile.StateRequesting, w.get(taker.ID).Status.State)
	assert.Empty(t, w.get(taker.ID).Status.SessionID)

	_, err = w.pass(w.giver.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateReleased, w.get(w.giver.ID).Status.State)
	assert.Equal(t, []string{w.giver.Status.SessionID}, w.juice.Calls().Cancelled)
}

// MayTake is the decision; the stores' queries only narrow down to the rows it is asked of.
func TestMayTake(t *testing.T) {
	giver := func() reconcile.Reservation {
		r := reconcile.Reservation{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: 7}, UserName: "alice", Account: "physics",
			Request: request.Request{Pool: pool, GPUs: 2}}
		r.Spec.RunOver = true
		r.Status = reconcile.Status{State: reconcile.StateReleasing, SessionID: "s1", ReadyAt: time.Unix(1, 0)}
		return r
	}
	taker := func() reconcile.Reservation {
		r := giver()
		r.ID, r.Run.JobID, r.Spec = uuid.New(), 8, reconcile.Spec{Wanted: true}
		r.Status = reconcile.Status{State: reconcile.StatePending}
		return r
	}
	g, tk := giver(), taker()
	require.True(t, reconcile.MayTake(&g, &tk))
	// A started run waiting with its own session queued.
	queued := func(t *reconcile.Reservation) {
		t.Status.State, t.Status.SessionID, t.Status.Requested, t.Spec.JobState = reconcile.StateWaiting, "s2", true, "RUNNING"
	}
	tk = taker()
	queued(&tk)
	require.True(t, reconcile.MayTake(&g, &tk))
	for name, change := range map[string]func(g, t *reconcile.Reservation){
		"a waiting taker not started":  func(_, t *reconcile.Reservation) { queued(t); t.Spec.JobState = "PENDING" },
		"a waiting taker with orphans": func(_, t *reconcile.Reservation) { queued(t); t.Status.MaybeOrphans = true },
		"a waiting taker sessionless":  func(_, t *reconcile.Reservation) { queued(t); t.Status.SessionID = "" },
		"another user":                 func(_, t *reconcile.Reservation) { t.UserName = "bob" },
		"another account":              func(_, t *reconcile.Reservation) { t.Account = "chem" },
		"another pool":                 func(_, t *reconcile.Reservation) { t.Request.Pool = "other" },
		"other GPUs":                   func(_, t *reconcile.Reservation) { t.Request.GPUs = 1 },
		"a VRAM slice":                 func(_, t *reconcile.Reservation) { t.Request.VRAM = 1 << 30 },
		"no user named":                func(g, t *reconcile.Reservation) { g.UserName, t.UserName = "", "" },
		"the same run":                 func(g, t *reconcile.Reservation) { t.Run = g.Run },
		"the same reservation":         func(g, t *reconcile.Reservation) { t.ID = g.ID },
		"a taker not wanted":           func(_, t *reconcile.Reservation) { t.Spec.Wanted = false },
		"a taker that asked":           func(_, t *reconcile.Reservation) { t.Status.State = reconcile.StateRequesting },
		"a taker ready":                func(_, t *reconcile.Reservation) { t.Status.State = reconcile.StateReady },
		"a giver not over":             func(g, _ *reconcile.Reservation) { g.Spec.RunOver = false },
		"a giver failed":               func(g, _ *reconcile.Reservation) { g.Status.FailReason = "lost" },
		"a giver never ready":          func(g, _ *reconcile.Reservation) { g.Status.ReadyAt = time.Time{} },
		"a giver still ready":          func(g, _ *reconcile.Reservation) { g.Status.State = reconcile.StateReady },
		"a giver with orphans":         func(g, _ *reconcile.Reservation) { g.Status.MaybeOrphans = true },
		"a giver sessionless":          func(g, _ *reconcile.Reservation) { g.Status.SessionID = "" },
		"an admin's release":           func(g, _ *reconcile.Reservation) { g.Spec.WantReason = reconcile.AdminReleased },
	} {
		g, tk := giver(), taker()
		change(&g, &tk)
		assert.False(t, reconcile.MayTake(&g, &tk), name)
	}
}

// A session whose file no key can open any more (the cluster key rotated twice since) is not handed on, and is
// cancelled at once even with a follower pending: waiting for one could not change that.
func TestASessionThatCannotBeResealedIsCancelledAtOnce(t *testing.T) {
	w := newHandoffWorld(t)
	w.followers = 1
	taker := w.next()
	other := bytes.Repeat([]byte{7}, len(clusterKey))
	w.rc.Key = session.StaticKey(other)
	assert.Zero(t, w.end().RequeueAfter)
	assert.Equal(t, reconcile.StateReleased, w.get(w.giver.ID).Status.State)
	assert.Equal(t, []string{w.giver.Status.SessionID}, w.juice.Calls().Cancelled)
	assert.Equal(t, reconcile.StatePending, w.get(taker.ID).Status.State)
}
