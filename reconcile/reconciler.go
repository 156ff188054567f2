package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// Store is what the Reconciler reads and writes: a reservation, and its status.
type Store interface {
	// Get returns a reservation without its sealed session file; ErrNotFound when there is none.
	Get(ctx context.Context, id uuid.UUID) (Reservation, error)
	// SaveStatus writes r's status, read at r.Status.Version, and t as an event; ErrConflict when the status
	// changed since.
	SaveStatus(ctx context.Context, r *Reservation, ts ...Transition) error
	// Sealed returns a reservation's sealed session file (to seal it again for the job an array element became).
	Sealed(ctx context.Context, id uuid.UUID) ([]byte, error)
	// HeldGPUs counts the GPUs user holds or is getting in pool: those of its reservations that were asked of
	// the Juice Controller and are not released yet (requesting, waiting, ready, releasing).
	HeldGPUs(ctx context.Context, pool, user string) (int, error)
	// HandoffTaker returns the reservation that from's session may pass to (MayTake): a wanted reservation alike to
	// from, pending or a started run's waiting with its own session queued; a started run's first, then the oldest;
	// ErrNotFound when none.
	HandoffTaker(ctx context.Context, from *Reservation) (Reservation, error)
	// HandoffLingers reports whether a reservation alike to to holds a session it may pass on, its run over and not
	// failed: releasing from ready since less than within ago, or still ready (its run's end not taken up yet). One
	// that may still hand it to to.
	HandoffLingers(ctx context.Context, to *Reservation, within time.Duration) (bool, error)
	// LikeAsking lists, oldest first, at most max wanted reservations alike to r (its user, account and request)
	// that asked the Juice Controller for a session of their own and wait for it (requesting, waiting).
	LikeAsking(ctx context.Context, r *Reservation, max int) ([]Reservation, error)
	// HandOver writes giver's and taker's statuses, each read at its Version, with their transitions, in one
	// transaction: ErrConflict, and nothing written, when either changed since.
	HandOver(ctx context.Context, giver, taker *Reservation, tg []Transition, tt Transition) error
	// YieldPool lets go, without ending their runs, the reservations of pool whose jobs Slurm shows pending and
	// that hold or ask for a session (requesting, waiting, ready), giving why (a spec write, as Unwant): a started
	// run's session waits for GPUs (MustYield). It returns how many it let go.
	YieldPool(ctx context.Context, pool, why string) (int, error)
}

// Reconciler is the one actor that moves reservations along the state machine: it drives each reservation
// towards what its spec asks (a session while the run is wanted, none once it is not), one pass at a time. A pass
// reads the row, acts on the Juice Controller, and writes the outcome; it can stop at any line (a crash, a lost
// lease, a conflicting write) and the next pass picks up from the row: the intent to request is committed before
// the request is sent, and the request carries the reservation's id as its idempotency key, so a repeated request
// finds the session the first one made instead of booking a second.
type Reconciler struct {
	Store Store
	Juice Juice
	// Key seals session files.
	Key session.KeySource
	// Files, when set, is the shared state directory: a run's session file is removed there when its reservation
	// stops being ready (nil: the state directory is not on this host; the epilog and the sweep remove files).
	Files *session.StateDir
	Log   logr.Logger
	// WaitPoll is how often a session that is queued or assigned at the controller is looked at again.
	WaitPoll time.Duration
	// ReadyCheck is how often a ready session is checked to be still alive.
	ReadyCheck time.Duration
	// Policy is the site's limits (nil: the grammar's bounds only). A request over them fails before anything is
	// asked of the Juice Controller: job_submit.lua refuses such a job at submission, so only a job submitted
	// before the limit changed, or around job_submit.lua, gets here.
	Policy *policy.Policy
	// Liveness, when set, checks ready sessions per pool walk instead of one GetSession each (liveness.go).
	Liveness *Liveness
	// Handoff, when set, passes an ended run's session to the next like run in the pools whose policy turns it on
	// (handoff.go); nil: every ended run's session is cancelled.
	Handoff *Handoff
	// capMu makes the count of a user's GPUs and the request that follows it one step, so that two workers never
	// both let a user past the site policy's cap (only the leader's reconciler moves reservations).
	capMu sync.Mutex
	// asked is when the last request of each reservation that may hold more than one session returned.
	asked askedAt
	// held are moves made in a pass and not written yet (hold), by reservation: passes of one reservation never
	// overlap.
	heldMu sync.Mutex
	held   map[uuid.UUID][]Transition
	// OnReady, when set, hears of each reservation that became ready (for metrics).
	OnReady func(r *Reservation)
	// OnHandoff, when set, hears of each session passed from an ended run to the next (for metrics).
	OnHandoff func(giver, taker *Reservation)
	// OnFreed, when set, hears of each pool where a run's session was cancelled (its reservation released): the
	// controller hands the pool's oldest queued runs to Hasten and to the queue at once, rather than at their next
	// WaitPoll.
	OnFreed func(ctx context.Context, pool string)
	// hastened is when each run Hasten named was named.
	hastenMu sync.Mutex
	hastened map[uuid.UUID]time.Time
	Now      func() time.Time
}

// Result tells the work queue when to look at the reservation again; zero means only when something changes.
type Result struct {
	RequeueAfter time.Duration
}

// assignedPollDivisor: a session assigned to an agent is looked at this many times as often as a queued one.
const assignedPollDivisor = 5

// maxSteps bounds the transitions of one pass; a reservation needs at most five to go from pending to released.
const maxSteps = 8

// Reconcile runs one pass over the reservation id.
func (rc *Reconciler) Reconcile(ctx context.Context, id uuid.UUID) (Result, error) {
	rc.asked.start(rc.now())
	r, err := rc.Store.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		rc.asked.forget(id)
		return Result{}, nil
	}
	if err != nil {
		return Result{}, err
	}
	log := rc.Log.WithValues("job", r.Run.JobID, "run", r.Run.Run, "reservation", r.ID)
	if r.Run.Element() {
		log = log.WithValues("array", r.Run.ArrayJobID, "task", r.Run.ArrayTaskID)
	}
	for i := 0; i < maxSteps; i++ {
		if r.Status.State.Final() {
			rc.asked.forget(id)
			return Result{}, nil
		}
		// A reservation that turned requesting in this very pass cannot have a request at the controller yet:
		// its first request needs no look for an earlier one.
		fresh := i > 0 && r.Status.State == StateRequesting && r.Status.Reason == requestReason(r)
		res, done, err := rc.step(ctx, log, &r, fresh)
		if err != nil || done {
			return res, errors.Join(err, rc.flush(ctx, log, &r))
		}
	}
	return Result{RequeueAfter: time.Second}, rc.flush(ctx, log, &r)
}

func requestReason(r Reservation) string {
	return "asking the Juice Controller for " + r.Request.Describe()
}

// step takes one transition (done false), or says how long to wait (done true). It is the dispatch of the state
// machine's handlers: one method per state, each deciding that state's next move alone.
func (rc *Reconciler) step(ctx context.Context, log logr.Logger, r *Reservation, fresh bool) (Result, bool, error) {
	// Not wanted any more: whatever it holds or is getting is let go, in every state that serves the run.
	if !r.Spec.Wanted && r.Status.State.Serving() {
		reason := r.Spec.WantReason
		if reason == "" {
			reason = "no longer wanted"
		}
		return Result{}, false, rc.apply(ctx, log, r, EventUnwanted, reason)
	}
	switch r.Status.State {
	case StatePending:
		return rc.pending(ctx, log, r)
	case StateRequesting:
		return rc.requesting(ctx, log, r, fresh)
	case StateWaiting:
		return rc.waiting(ctx, log, r)
	case StateReady:
		return rc.ready(ctx, log, r)
	case StateReleasing:
		return rc.releasing(ctx, log, r)
	}
	return Result{}, true, fmt.Errorf("reservation %s: unknown state %q", r.ID, r.Status.State)
}

// pending: the site policy first (a request over it fails for good), then the user's cap in the pool, then the
// intent to request, committed before the controller is asked: a crash after it finds the reservation requesting,
// and asks again with the same key.
func (rc *Reconciler) pending(ctx context.Context, log logr.Logger, r *Reservation) (Result, bool, error) {
	if err := rc.Policy.Check(r.Request, policy.Job{Account: r.Account, Partition: r.Partition}); err != nil {
		// Permanent: asking again cannot help, so the run fails now with the limit it breaks.
		return Result{}, false, rc.apply(ctx, log, r, EventFail, err.Error())
	}
	if res, done, err := rc.awaitHandoff(ctx, r); done {
		return res, done, err
	}
	if rc.Policy.UserCap(r.Request.Pool) > 0 {
		return rc.requestWithinCap(ctx, log, r)
	}
	return Result{}, false, rc.apply(ctx, log, r, EventRequest, requestReason(*r))
}

// neverFits is the failure of a run that the Juice Controller can never serve.
func (rc *Reconciler) neverFits(ctx context.Context, log logr.Logger, r *Reservation, err error) error {
	return rc.apply(ctx, log, r, EventFail, "the Juice Controller cannot ever fit "+r.Request.Describe()+": "+err.Error())
}

// requesting: a request with this key may be at the controller already (a crash, or an answer lost on the way),
// and a controller without idempotency would book a second session. So, unless the intent was committed in this
// very pass, look first: the run's sessions carry its key. A session still queued is not on any agent yet; if one
// is booked twice that way, the orphan is cancelled once it is placed (when the run becomes ready, or by the
// sweep). Then ask.
func (rc *Reconciler) requesting(ctx context.Context, log logr.Logger, r *Reservation, fresh bool) (Result, bool, error) {
	if !fresh {
		found, err := rc.adoptEarlier(ctx, log, r)
		if errors.Is(err, ErrNeverFits) { // the pool cannot be named to the controller
			return Result{}, false, rc.neverFits(ctx, log, r, err)
		}
		if err != nil || found {
			return Result{}, err != nil, err
		}
	}
	sid, err := rc.Juice.RequestSession(ctx, r.ID, r.Request)
	if err != nil || r.Status.MaybeOrphans {
		rc.asked.set(r.ID, rc.now())
	}
	switch {
	case errors.Is(err, ErrNeverFits):
		return Result{}, false, rc.neverFits(ctx, log, r, err)
	case errors.Is(err, ErrRefused):
		return Result{}, false, rc.apply(ctx, log, r, EventFail, "the Juice client refuses "+r.Request.Describe()+": "+err.Error())
	case err != nil:
		return Result{}, true, fmt.Errorf("request session: %w", err)
	}
	r.Status.SessionID = sid
	// Not written yet: the next step reads the session, and a controller that places it at once (most requests on
	// a pool with room) lets both moves be one write: 2 writes per run served instead of 3. The move is written
	// whatever that read gives (Reconcile flushes it); a crash before that is a lost answer, which the next pass
	// finds by the run's key.
	return Result{}, false, rc.hold(log, r, EventQueued, "session "+sid+" queued at the Juice Controller")
}

// adoptEarlier looks for a session an earlier attempt booked under the run's key and, when there is one, takes it
// (cancelling any twin) and moves to waiting: found is true then. From here on the session learnt may have a twin
// (MaybeOrphans).
func (rc *Reconciler) adoptEarlier(ctx context.Context, log logr.Logger, r *Reservation) (found bool, err error) {
	r.Status.MaybeOrphans = true
	view, err := rc.view(ctx, r.ID, r.Request.Pool)
	if err != nil {
		if errors.Is(err, ErrNeverFits) {
			return false, err
		}
		return false, fmt.Errorf("look for the run's sessions before asking: %w", err)
	}
	sessions := view.ByKey(r.ID.String())
	if len(sessions) == 0 {
		return false, nil
	}
	keep := sessions[0].Session.ID
	if _, err := rc.cancelOrphans(ctx, log, view, r, keep); err != nil {
		return false, err
	}
	r.Status.SessionID = keep
	return true, rc.apply(ctx, log, r, EventQueued, "session "+keep+" found at the Juice Controller by the run's key (its answer was lost)")
}

// waiting: the session is queued or assigned at the controller; it becomes ready once active and serving what
// was asked, and the run loses it if the controller ends it first.
func (rc *Reconciler) waiting(ctx context.Context, log logr.Logger, r *Reservation) (Result, bool, error) {
	s, err := rc.Juice.GetSession(ctx, r.Status.SessionID, r.Request)
	if errors.Is(err, ErrNoSession) {
		return Result{}, false, rc.apply(ctx, log, r, EventClosed, "the Juice Controller no longer knows session "+r.Status.SessionID)
	}
	if err != nil {
		return Result{}, true, fmt.Errorf("get session: %w", err)
	}
	switch {
	case s.Active() && s.Unfit != "":
		// Not what was asked: not ready. Say so once (the reason shows in describe), and look again.
		if why := "not ready: " + s.Unfit; r.Status.Reason != why {
			if err := rc.apply(ctx, log, r, EventQueued, why); err != nil {
				return Result{}, true, err
			}
		}
		return Result{RequeueAfter: rc.WaitPoll}, true, nil
	case s.Active():
		return rc.becomeReady(ctx, log, r, s)
	case s.Ended():
		return Result{}, false, rc.apply(ctx, log, r, EventClosed,
			fmt.Sprintf("the Juice Controller ended session %s (%s) before it became active", s.ID, s.State))
	case s.Phase == SessionAssigned:
		// Placed on an agent, which is starting it: active within moments, and a job may be waiting for it in its
		// prolog (an array's elements, one after the other on a full pool): look again sooner.
		return Result{RequeueAfter: rc.WaitPoll / assignedPollDivisor}, true, nil
	case MustYield(r, s, rc.now()):
		// Started, and no GPU for it: the pool's GPUs held or queued for ahead for pending jobs go first to it.
		n, err := rc.Store.YieldPool(ctx, r.Request.Pool, YieldReason(r.Request.Pool, r.Run))
		if err != nil {
			return Result{}, true, fmt.Errorf("let pending jobs' reservations of pool %s go: %w", r.Request.Pool, err)
		}
		if n > 0 {
			log.Info("pending jobs' reservations let the pool go to a started job", "pool", r.Request.Pool, "yielded", n)
		}
	}
	if rc.hastenedLately(r.ID) {
		// Its pool has GPUs back since moments ago: placed at the scheduler's next tick, looked at as if assigned.
		return Result{RequeueAfter: rc.WaitPoll / assignedPollDivisor}, true, nil
	}
	return Result{RequeueAfter: rc.WaitPoll}, true, nil
}

// becomeReady seals the session file of an active session that serves the request and moves to ready. Other
// sessions carrying the run's key are orphans of a lost answer: placed by now, if at all. Only a run that asked
// more than once can have them; walking the pool for every run would cost each reservation a call per agent
// (10,000 runs on 1,250 agents never became ready).
func (rc *Reconciler) becomeReady(ctx context.Context, log logr.Logger, r *Reservation, s Session) (Result, bool, error) {
	if r.Status.MaybeOrphans {
		view, err := rc.view(ctx, r.ID, r.Request.Pool)
		if err != nil {
			return Result{}, true, fmt.Errorf("look for orphans of the run: %w", err)
		}
		if _, err := rc.cancelOrphans(ctx, log, view, r, s.ID); err != nil {
			return Result{}, true, err
		}
	}
	if err := rc.seal(r, s); err != nil {
		return Result{}, false, rc.apply(ctx, log, r, EventFail, "cannot seal the session file: "+err.Error())
	}
	if err := rc.apply(ctx, log, r, EventActive, "session "+s.ID+" active on agent "+s.Address); err != nil {
		return Result{}, true, err
	}
	if rc.OnReady != nil {
		rc.OnReady(r)
	}
	// Just seen active: the first check that it is still alive is due in ReadyCheck, not now.
	return rc.checkAgain(), true, nil
}

// ready: an array element reserved ahead was sealed before slurmctld gave it its job id, and once bound its file
// is sealed again for that job, from the one sealed before, without asking the controller. Otherwise the session
// is checked to be still alive: per pool walk (checkLive) or, without the liveness watch, by reading it.
func (rc *Reconciler) ready(ctx context.Context, log logr.Logger, r *Reservation) (Result, bool, error) {
	if r.Run.JobID != 0 && r.Status.SealedJobID != r.Run.JobID {
		if err := rc.reseal(ctx, r); err != nil {
			return Result{}, true, fmt.Errorf("seal the session file again for job %d: %w", r.Run.JobID, err)
		}
		return Result{}, false, rc.apply(ctx, log, r, EventBound,
			fmt.Sprintf("session %s sealed for job %d (array element %d_%d)", r.Status.SessionID, r.Run.JobID, r.Run.ArrayJobID, r.Run.ArrayTaskID))
	}
	if rc.Liveness != nil {
		return rc.checkLive(ctx, log, r)
	}
	s, err := rc.Juice.GetSession(ctx, r.Status.SessionID, r.Request)
	if errors.Is(err, ErrNoSession) || err == nil && s.Ended() {
		return Result{}, false, rc.apply(ctx, log, r, EventClosed, "the Juice Controller ended session "+r.Status.SessionID+" while the job held it")
	}
	if err != nil {
		return Result{}, true, fmt.Errorf("check session: %w", err)
	}
	return Result{RequeueAfter: rc.ReadyCheck}, true, nil
}

// releasing: every session the run may hold is cancelled, then the reservation is released (or failed, when a
// failure brought it here). A session still waiting for its agent is cancelled once the agent holds it.
func (rc *Reconciler) releasing(ctx context.Context, log logr.Logger, r *Reservation) (Result, bool, error) {
	if res, done, err := rc.passOn(ctx, log, r); done || err != nil || r.Status.State.Final() {
		return res, done || err != nil, err
	}
	reason := "no session was ever made"
	if r.Status.Requested && (r.Status.MaybeOrphans || r.Status.SessionID == "") {
		found, notYet, err := rc.cancelByKey(ctx, log, r)
		if err != nil {
			return Result{}, true, err
		}
		if notYet > 0 {
			return Result{RequeueAfter: rc.WaitPoll}, true, nil // cancelled once their agent has them
		}
		if r.Status.SessionID == "" && found > 0 {
			reason = fmt.Sprintf("%d session(s) found by the run's key cancelled at the Juice Controller", found)
		}
	}
	if r.Status.SessionID != "" {
		err := rc.Juice.CancelSession(ctx, r.Status.SessionID)
		if errors.Is(err, ErrNotYet) {
			return Result{RequeueAfter: rc.WaitPoll}, true, nil
		}
		if err != nil && !errors.Is(err, ErrNoSession) {
			return Result{}, true, fmt.Errorf("cancel session: %w", err)
		}
		reason = "session " + r.Status.SessionID + " cancelled at the Juice Controller"
	}
	if err := rc.apply(ctx, log, r, EventClosed, reason); err != nil {
		return Result{}, false, err
	}
	if (r.Status.Requested || r.Status.SessionID != "") && rc.OnFreed != nil {
		rc.OnFreed(ctx, r.Request.Pool) // the pool has GPUs back (a session taken from a run before asked for none)
	}
	return Result{}, false, nil
}

// Hasten has the runs ids, queued in a pool that just got GPUs back, looked at as often as assigned ones for about
// one tick of the Juice scheduler (WaitPoll, 1 s for the legacy controller), in which one of them may be placed:
// the next run waiting in its prolog is seen placed sooner. Only runs named here are: a pool's whole queue polled
// that often would multiply the calls to the Juice Controller.
func (rc *Reconciler) Hasten(ids ...uuid.UUID) {
	rc.hastenMu.Lock()
	defer rc.hastenMu.Unlock()
	now := rc.now()
	if rc.hastened == nil {
		rc.hastened = map[uuid.UUID]time.Time{}
	}
	for id, at := range rc.hastened {
		if now.Sub(at) >= rc.WaitPoll {
			delete(rc.hastened, id)
		}
	}
	for _, id := range ids {
		rc.hastened[id] = now
	}
}

// hastenedLately reports whether run id was named to Hasten within the last WaitPoll.
func (rc *Reconciler) hastenedLately(id uuid.UUID) bool {
	rc.hastenMu.Lock()
	defer rc.hastenMu.Unlock()
	at, ok := rc.hastened[id]
	return ok && rc.now().Sub(at) < rc.WaitPoll
}

// cancelByKey cancels every placed session carrying the run's key but the one it knows: a request may have reached
// the controller without its answer reaching us. (Asking again with the key to learn the session would book one
// more at a controller without idempotency.) One still queued is caught by the sweep once placed. A session got on
// the first request is the key's only one, and the caller cancels it without a walk. found counts the sessions
// carrying the key; notYet those that cannot be cancelled before their agent takes them.
func (rc *Reconciler) cancelByKey(ctx context.Context, log logr.Logger, r *Reservation) (found, notYet int, err error) {
	view, err := rc.view(ctx, r.ID, r.Request.Pool)
	if errors.Is(err, ErrNeverFits) {
		return 0, 0, nil // a pool that cannot be named was never asked of: no session carries the key
	}
	if err != nil {
		return 0, 0, fmt.Errorf("find the run's sessions to release: %w", err)
	}
	sessions := view.ByKey(r.ID.String())
	notYet, err = rc.cancelOrphans(ctx, log, view, r, r.Status.SessionID)
	return len(sessions), notYet, err
}

// requestWithinCap asks for r's session when its user stays within the site policy's cap on GPUs in the pool,
// and otherwise keeps it pending, saying why (once: the reason shows in describe and jobs, and the job actor
// writes it into the job's comment), and looks again after WaitPoll: what users expect of a quota, a run that
// waits its turn rather than one that fails.
func (rc *Reconciler) requestWithinCap(ctx context.Context, log logr.Logger, r *Reservation) (Result, bool, error) {
	rc.capMu.Lock()
	defer rc.capMu.Unlock()
	held, err := rc.Store.HeldGPUs(ctx, r.Request.Pool, r.UserName)
	if err != nil {
		return Result{}, true, fmt.Errorf("count the GPUs user %q holds in pool %s: %w", r.UserName, r.Request.Pool, err)
	}
	if why := rc.Policy.Wait(r.Request, r.UserName, held); why != "" {
		if r.Status.Reason != why {
			if err := rc.apply(ctx, log, r, EventWait, why); err != nil {
				return Result{}, true, err
			}
		}
		return Result{RequeueAfter: rc.WaitPoll}, true, nil
	}
	return Result{}, false, rc.apply(ctx, log, r, EventRequest, requestReason(*r))
}

// view returns the pool's agents and the sessions they hold (the run's key finds its sessions there), as seen
// after the last request of reservation id returned, so that what that request booked is in it. Reservations
// share a walk of their pool through Liveness: a burst of them looking for their sessions (after a restart, or
// an outage of the controller) costs a walk of the pool, not one per reservation.
func (rc *Reconciler) view(ctx context.Context, id uuid.UUID, pool string) (PoolView, error) {
	if rc.Liveness != nil {
		return rc.Liveness.View(ctx, pool, rc.asked.since(id))
	}
	return rc.Juice.WalkPool(ctx, pool, rc.now())
}

// askedAt remembers, for reservations that may hold more than one session, when their last request to the
// controller returned (this process's clock). A reservation it does not name was last asked before the first
// pass of this reconciler: by an earlier process, whose leader lease ran out before this one took it.
type askedAt struct {
	mu    sync.Mutex
	first time.Time
	at    map[uuid.UUID]time.Time
}

// start notes the first pass's time, once.
func (a *askedAt) start(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.first.IsZero() {
		a.first = now
	}
}

func (a *askedAt) since(id uuid.UUID) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.at[id]; ok {
		return t
	}
	return a.first
}

func (a *askedAt) set(id uuid.UUID, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.at == nil {
		a.at = map[uuid.UUID]time.Time{}
	}
	a.at[id] = t
}

func (a *askedAt) forget(id uuid.UUID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.at, id)
}

// cancelOrphans cancels every session of view carrying r's key but keep: a second session booked for the run
// by a request whose answer was lost. notYet counts those that cannot be cancelled before their agent takes them
// (ErrNotYet).
func (rc *Reconciler) cancelOrphans(ctx context.Context, log logr.Logger, view PoolView, r *Reservation, keep string) (notYet int, err error) {
	for _, h := range view.ByKey(r.ID.String()) {
		if h.Session.ID == keep {
			continue
		}
		err := rc.Juice.CancelSession(ctx, h.Session.ID)
		if errors.Is(err, ErrNotYet) {
			notYet++
			continue
		}
		if err != nil && !errors.Is(err, ErrNoSession) {
			return notYet, fmt.Errorf("cancel orphan session %s of the run: %w", h.Session.ID, err)
		}
		log.Info("cancelled an orphan session of the run", "session", h.Session.ID, "agent", h.Agent.ID, "kept", keep)
	}
	return notYet, nil
}

// seal writes the session file for an active session into r's status: exactly the GPUs asked for, even when
// the controller gave more (the legacy one gives every GPU of the agent).
func (rc *Reconciler) seal(r *Reservation, s Session) error {
	key, err := rc.Key.Bytes()
	if err != nil {
		return err
	}
	g := session.Grant{SessionID: s.ID, Address: s.Address, GPUs: s.GPUs}
	b := r.Run.Binding()
	b.Reservation = r.ID
	sealed, err := session.Seal(key, b, session.Env(r.Request, g))
	if err != nil {
		return err
	}
	r.Status.Sealed, r.Status.AgentAddress, r.Status.ReadyAt = sealed, s.Address, rc.now()
	r.Status.SealedJobID = r.Run.JobID
	return nil
}

// reseal seals r's session file again for the job r's run is bound to, from the file sealed for the binding it
// had (job 0: the array element before slurmctld gave it a job id), under the key that seals now. The old file
// opens under the current key, or the previous one when the key was rotated since it was sealed.
func (rc *Reconciler) reseal(ctx context.Context, r *Reservation) error {
	key, keys, err := rc.keys()
	if err != nil {
		return err
	}
	old, err := rc.Store.Sealed(ctx, r.ID)
	if err != nil {
		return err
	}
	was := r.Run.Binding()
	was.JobID, was.Reservation = r.Status.SealedJobID, r.ID
	env, err := session.Open(old, was, keys...)
	if err != nil {
		return err
	}
	now := r.Run.Binding()
	now.Reservation = r.ID
	sealed, err := session.Seal(key, now, env)
	if err != nil {
		return err
	}
	r.Status.Sealed, r.Status.SealedJobID = sealed, r.Run.JobID
	return nil
}

// keys returns the key that seals now and every key a file may have been sealed under (the current one, and the
// previous one while a rotation is under way).
func (rc *Reconciler) keys() (key []byte, keys [][]byte, err error) {
	if key, err = rc.Key.Bytes(); err != nil {
		return nil, nil, err
	}
	keys = [][]byte{key}
	if all, ok := rc.Key.(interface{ All() ([][]byte, error) }); ok {
		if keys, err = all.All(); err != nil {
			return nil, nil, err
		}
	}
	return key, keys, nil
}

func (rc *Reconciler) apply(ctx context.Context, log logr.Logger, r *Reservation, ev Event, reason string) error {
	t, err := Apply(r, ev, reason, rc.now())
	if err != nil {
		return err
	}
	return rc.save(ctx, log, r, append(rc.takeHeld(r.ID), t))
}

// hold moves r along one edge without writing it: the next apply (or the pass's end, flush) writes it with what
// follows, in one statement.
func (rc *Reconciler) hold(log logr.Logger, r *Reservation, ev Event, reason string) error {
	t, err := Apply(r, ev, reason, rc.now())
	if err != nil {
		return err
	}
	rc.heldMu.Lock()
	defer rc.heldMu.Unlock()
	if rc.held == nil {
		rc.held = map[uuid.UUID][]Transition{}
	}
	rc.held[r.ID] = append(rc.held[r.ID], t)
	return nil
}

func (rc *Reconciler) takeHeld(id uuid.UUID) []Transition {
	rc.heldMu.Lock()
	defer rc.heldMu.Unlock()
	ts := rc.held[id]
	delete(rc.held, id)
	return ts
}

// flush writes the moves held in this pass, if any.
func (rc *Reconciler) flush(ctx context.Context, log logr.Logger, r *Reservation) error {
	if ts := rc.takeHeld(r.ID); len(ts) > 0 {
		return rc.save(ctx, log, r, ts)
	}
	return nil
}

func (rc *Reconciler) save(ctx context.Context, log logr.Logger, r *Reservation, ts []Transition) error {
	if err := rc.Store.SaveStatus(ctx, r, ts...); err != nil {
		return err
	}
	for _, t := range ts {
		log.Info("reservation moved", "from", t.From, "to", t.To, "reason", t.Reason)
		if t.From == StateReady && t.To != StateReady {
			rc.removeFile(log, r)
		}
	}
	return nil
}

// removeFile removes the run's session file once its reservation stops being ready: the session it carries is
// being let go, and a file left behind is one a later job with the same id could be handed (the epilog removes
// it too, when it runs; the sweep catches what both miss). A failure is logged, never fatal: the transition
// stands, and the sweep tries again.
func (rc *Reconciler) removeFile(log logr.Logger, r *Reservation) {
	if rc.Files == nil {
		return
	}
	b := r.Run.Binding()
	b.Reservation = r.ID
	removed, err := rc.Files.RemoveFor(b)
	switch {
	case err != nil:
		log.Error(err, "cannot remove the run's session file; the sweep tries again")
	case removed:
		log.Info("removed the run's session file", "file", session.FileName(b))
	}
}

func (rc *Reconciler) now() time.Time {
	if rc.Now != nil {
		return rc.Now()
	}
	return time.Now()
}
