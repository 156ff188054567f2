package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// Session hand-off. An array's elements, or a user's burst of like jobs, on a full pool each pay a session's start
// (a tick of the Juice scheduler and the agent's activation) after the run before them let its GPUs go. With
// hand-off on for a pool (the site policy's pool.<name>.handoff), a run that ends passes its session to the next
// run alike (same user, same account, same request) that waits for one and has asked nothing of the Juice
// Controller yet: the ended run's reservation is released without a cancel, the next run's becomes ready on that
// session, its file sealed for it alone, and both histories say so (EventHanded, EventTaken), in one transaction.
//
// What it trades: the GPUs pass from one of the user's processes to the next without the agent starting a new
// session, so whatever the first left in the session's GPU memory the next may see. Only the same user's runs of
// the same account are ever joined that way: never across users or accounts, never to a run that was not waiting.
//
// When the ended run's job goes (its epilog, or the poller seeing it end), the next run is often not known yet:
// with pool licenses on, Slurm starts it only once the ended job's license is back, and its run comes with its
// prolog moments later. So an ended run whose pool has a like job pending in Slurm (Handoff.Followers, the
// poller's last listing) keeps its session, releasing, for at most Handoff.Wait, looked at every handoffPoll; and a
// pending run that finds such a session lingering waits for it instead of asking for a new one. The ended run's
// pass alone decides: it hands over or, once the wait is over, cancels; the waiting run never takes a session
// itself, so a cancel and a hand-off never cross.

// DefaultHandoffWait is how long an ended run's session waits for a like run by default: enough for slurmctld to
// start the next job and its prolog to register it (about 2 s on the test beds' 22.05, 24.11 and 26.05, an array's
// next element after the one before it ended), short against a session's start.
const DefaultHandoffWait = 5 * time.Second

// handoffPoll is how often a lingering session and a run waiting for it look for each other.
const handoffPoll = 100 * time.Millisecond

// Handoff configures session hand-off; which pools have it is the site policy's (Policy.Handoff).
type Handoff struct {
	// Followers reports whether Slurm shows a job alike to l pending that may start as soon as a like run ends
	// (Follows): only then does an ended run's session wait for one. Nil: it never waits, and passes only to a run
	// that waits already.
	Followers func(l Likeness) bool
	// Wait is the longest an ended run's session waits for a like run; 0 is DefaultHandoffWait.
	Wait time.Duration
}

func (h *Handoff) wait() time.Duration {
	if h.Wait > 0 {
		return h.Wait
	}
	return DefaultHandoffWait
}

// A Likeness is what two runs share when one's session may pass to the other: user, account and request (pool,
// GPUs and VRAM). A run whose user Slurm did not name has none.
type Likeness struct {
	User, Account string
	Request       request.Request
}

// Likeness returns the run's likeness; ok false when its user is unknown (such a run never hands on or takes).
func (r *Reservation) Likeness() (l Likeness, ok bool) {
	return Likeness{User: r.UserName, Account: r.Account, Request: r.Request}, r.UserName != ""
}

// MayTake reports whether taker may take giver's session: the one decision of who may receive a session, which the
// store's queries (HandoffTaker, HandoffLingers) only narrow down to. giver has ended (releasing, not failed, its
// session active when it was ready) and taker is wanted and waits for a session: either it has asked for none
// (pending), or Slurm started its job and it waits with a session of its own queued at the Juice Controller
// (waitsQueued). Both alike, and not the same run.
func MayTake(giver, taker *Reservation) bool {
	gl, ok := giver.Likeness()
	tl, ok2 := taker.Likeness()
	return ok && ok2 && gl == tl && giver.ID != taker.ID && giver.Run != taker.Run && mayGive(giver) &&
		taker.Spec.Wanted && (taker.Status.State == StatePending || waitsQueued(taker))
}

// waitsQueued reports whether r is a started run waiting for the session it asked for, which is the only one its key
// names: it may take a like run's session instead, its own then cancelled (handOver). Without this a user's burst
// on a full pool switches for good to every job asking for its own session once one job's prolog came before the
// end of the job whose license it got: every ended session was then cancelled for the runs that waited in the Juice
// queue. A run reserved ahead whose job has not started is not one: the session would wait on a job Slurm holds.
func waitsQueued(r *Reservation) bool {
	s := r.Status
	return s.State == StateWaiting && Started(r.Spec.JobState) && s.SessionID != "" && !s.MaybeOrphans
}

// AdminReleased is the reason juice-slurm release records: an administrator wants the run's session cancelled and
// its GPUs back in the pool, so it is never handed on.
const AdminReleased = "released by an administrator (juice-slurm release)"

// mayGive reports whether r holds a session it may pass on: its run is over (a run let go only for now, held or
// yielding to a started job, keeps nothing to pass: its GPUs go back to the pool) and not by an administrator's
// release, it was ready (its session active and sealed for it), it did not fail, and its session is the only one
// its key may name.
func mayGive(r *Reservation) bool {
	s := r.Status
	return r.Spec.RunOver && r.Spec.WantReason != AdminReleased && s.State == StateReleasing && s.FailReason == "" &&
		s.SessionID != "" && !s.ReadyAt.IsZero() && !s.MaybeOrphans
}

// Follows reports whether a job Slurm shows in jobState, pending for reason, may start as soon as a like run ends:
// pending for its turn (waitReasons) or for the pool's license, which the ended run's job gave back.
func Follows(jobState, reason string) bool {
	return jobState == "PENDING" && (waitReasons[reason] || reason == "Licenses")
}

func (rc *Reconciler) handoffOn(r *Reservation) bool {
	return rc.Handoff != nil && rc.Policy.Handoff(r.Request.Pool)
}

// passOn is the releasing run's half of hand-off, before its session is cancelled: a like run waiting → the session
// is handed to it (r is then released); none yet, but one pending in Slurm and the wait not over → wait (done, with
// a time to look again); otherwise nothing, and the caller cancels.
func (rc *Reconciler) passOn(ctx context.Context, log logr.Logger, r *Reservation) (Result, bool, error) {
	if !rc.handoffOn(r) || !mayGive(r) {
		return Result{}, false, nil
	}
	taker, err := rc.Store.HandoffTaker(ctx, r)
	switch {
	case err == nil && MayTake(r, &taker):
		served, err := rc.servedByOwn(ctx, &taker)
		if err != nil {
			return Result{}, true, err
		}
		if !served {
			return Result{}, false, rc.handOver(ctx, log, r, &taker)
		}
	case err != nil && !errors.Is(err, ErrNotFound):
		return Result{}, true, fmt.Errorf("look for a run to hand session %s to: %w", r.Status.SessionID, err)
	}
	l, _ := r.Likeness()
	if rc.Handoff.Followers == nil || rc.now().Sub(r.Status.UpdatedAt) >= rc.Handoff.wait() || !rc.Handoff.Followers(l) {
		return Result{}, false, nil
	}
	queued, err := rc.likeQueued(ctx, r)
	if err != nil {
		return Result{}, true, err
	}
	if queued {
		return Result{}, false, nil
	}
	return Result{RequeueAfter: handoffPoll}, true, nil
}

// maxLikeAsking bounds the like runs likeQueued reads; more than that waiting for their own is taken as queued.
const maxLikeAsking = 8

// likeQueued reports whether a like run waits for a session of its own still queued at the Juice Controller (or
// not asked for yet): it gets these GPUs from the queue once r's session is cancelled, and lingering would keep it
// waiting longer. A like run whose own session an agent was given already loses nothing by the wait, and the session
// then goes to the next like job Slurm starts (without this, an array whose elements each started while the one
// before still ran asked for a session per element from then on, every ended session cancelled: bench-licenses).
// Each look reads the sessions of the like runs still waiting: a placed session is active within the agent's start
// (a second in the simulator) and its run then waits no more, so a lingering session's 100 ms looks read each at
// most a few times.
func (rc *Reconciler) likeQueued(ctx context.Context, r *Reservation) (bool, error) {
	asking, err := rc.Store.LikeAsking(ctx, r, maxLikeAsking+1)
	if err != nil {
		return false, fmt.Errorf("look for a like run waiting for its own session: %w", err)
	}
	if len(asking) > maxLikeAsking {
		return true, nil
	}
	for i := range asking {
		a := &asking[i]
		if a.Status.State != StateWaiting || a.Status.SessionID == "" {
			return true, nil
		}
		s, err := rc.Juice.GetSession(ctx, a.Status.SessionID, a.Request)
		switch {
		case errors.Is(err, ErrNoSession):
			// Gone: it holds nothing and asks for nothing until its own pass finds it lost.
		case err != nil:
			return false, fmt.Errorf("read the session %s of like reservation %s: %w", a.Status.SessionID, a.ID, err)
		case s.Phase == SessionQueued:
			return true, nil
		}
	}
	return false, nil
}

// awaitHandoff is the pending run's half: a like run's session lingers for one, or its run ended and the reconciler
// has not taken that up yet (the next job's prolog often comes before: Slurm starts it as soon as the ended job's
// license is back) → wait for it (done), rather than ask the Juice Controller for a session that would queue
// behind it.
func (rc *Reconciler) awaitHandoff(ctx context.Context, r *Reservation) (Result, bool, error) {
	if !rc.handoffOn(r) {
		return Result{}, false, nil
	}
	if _, ok := r.Likeness(); !ok {
		return Result{}, false, nil
	}
	lingers, err := rc.Store.HandoffLingers(ctx, r, rc.Handoff.wait())
	if err != nil {
		return Result{}, true, fmt.Errorf("look for a like run's session to take: %w", err)
	}
	if lingers {
		return Result{RequeueAfter: handoffPoll}, true, nil
	}
	return Result{}, false, nil
}

// servedByOwn reports whether taker waits for a session of its own that an agent was given already: it is served
// shortly, and takes nothing (a run whose own is still queued takes a like run's, see waitsQueued).
func (rc *Reconciler) servedByOwn(ctx context.Context, taker *Reservation) (bool, error) {
	if taker.Status.State != StateWaiting {
		return false, nil
	}
	s, err := rc.Juice.GetSession(ctx, taker.Status.SessionID, taker.Request)
	switch {
	case errors.Is(err, ErrNoSession):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the queued session %s of reservation %s: %w", taker.Status.SessionID, taker.ID, err)
	}
	return s.Phase != SessionQueued, nil
}

// handOver passes giver's session to taker: its file opened as sealed for giver and sealed again for taker, both
// moves written in one transaction. A file that cannot be opened (a key rotated twice since) is not handed on:
// giver cancels its session as without hand-off.
//
// A taker that waits with a session of its own still queued (waitsQueued, and not servedByOwn) has that one
// cancelled once the transaction committed, so that the run never ends up without a session; should the cancel
// fail (its agent was given it since, or the Juice Controller cannot be reached), the session's key names a run that
// holds another session, and the sweep cancels it as an orphan.
func (rc *Reconciler) handOver(ctx context.Context, log logr.Logger, giver, taker *Reservation) error {
	own := ""
	if taker.Status.State == StateWaiting {
		own = taker.Status.SessionID
	}
	sealed, err := rc.resealFor(ctx, giver, taker)
	if err != nil {
		log.Error(err, "the session cannot be handed on; it is cancelled", "to", taker.ID)
		return nil
	}
	sid := giver.Status.SessionID
	tg, err := Apply(giver, EventHanded, fmt.Sprintf("session %s handed to job %d (run %d, reservation %s), not cancelled",
		sid, taker.Run.JobID, taker.Run.Run, taker.ID), rc.now())
	if err != nil {
		return err
	}
	why := fmt.Sprintf("session %s of job %d (run %d, reservation %s) handed over on agent %s, sealed for this run",
		sid, giver.Run.JobID, giver.Run.Run, giver.ID, giver.Status.AgentAddress)
	if own != "" {
		why += "; its own session " + own + ", still queued, is cancelled"
	}
	tt, err := Apply(taker, EventTaken, why, rc.now())
	if err != nil {
		return err
	}
	t := &taker.Status
	t.SessionID, t.AgentAddress, t.ReadyAt = sid, giver.Status.AgentAddress, rc.now()
	t.Sealed, t.SealedJobID = sealed, taker.Run.JobID
	if err := rc.Store.HandOver(ctx, giver, taker, append(rc.takeHeld(giver.ID), tg), tt); err != nil {
		return fmt.Errorf("hand session %s to reservation %s: %w", sid, taker.ID, err)
	}
	log.Info("reservation moved", "from", tg.From, "to", tg.To, "reason", tg.Reason)
	log.Info("session handed on", "session", sid, "toJob", taker.Run.JobID, "toRun", taker.Run.Run, "to", taker.ID)
	if own != "" {
		if err := rc.Juice.CancelSession(ctx, own); err != nil && !errors.Is(err, ErrNoSession) {
			log.Error(err, "the taker's own queued session is left to the sweep", "session", own, "reservation", taker.ID)
		}
	}
	if rc.OnReady != nil {
		rc.OnReady(taker)
	}
	if rc.OnHandoff != nil {
		rc.OnHandoff(giver, taker)
	}
	return nil
}

// resealFor opens giver's session file, as sealed for giver's job, and seals what it carries for taker's run.
func (rc *Reconciler) resealFor(ctx context.Context, giver, taker *Reservation) ([]byte, error) {
	key, keys, err := rc.keys()
	if err != nil {
		return nil, err
	}
	old, err := rc.Store.Sealed(ctx, giver.ID)
	if err != nil {
		return nil, err
	}
	was := giver.Run.Binding()
	was.JobID, was.Reservation = giver.Status.SealedJobID, giver.ID
	env, err := session.Open(old, was, keys...)
	if err != nil {
		return nil, err
	}
	b := taker.Run.Binding()
	b.Reservation = taker.ID
	return session.Seal(key, b, env)
}
