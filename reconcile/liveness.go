package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
)

// Liveness checks ready sessions a pool at a time. One walk of a pool (its agent listing, then one read per
// active agent) serves every ready run of that pool for Period, so the calls per check period grow with the
// pool's agents, not with its sessions: 10,000 ready runs on 100 agents cost about 101 calls a period instead
// of 10,000 GetSession calls. It only observes; the Reconciler decides what a view means (checkLive).
type Liveness struct {
	Juice PoolWalker
	// Period is how long a walk serves. Default 30s (the ready check).
	Period time.Duration
	// Watched says a watch calls Suspects every Period and enqueues what it returns (the controller's): ready
	// runs then get no pass of their own each Period.
	Watched bool
	Now     func() time.Time

	mu    sync.Mutex
	pools map[string]*poolWalk
}

type poolWalk struct {
	mu   sync.Mutex // one walk of a pool at a time; the others wait for it and share it
	view PoolView
}

// View returns a walk of pool taken at or after notBefore and at most Period ago, walking again when there is
// none.
func (l *Liveness) View(ctx context.Context, pool string, notBefore time.Time) (PoolView, error) {
	l.mu.Lock()
	if l.pools == nil {
		l.pools = map[string]*poolWalk{}
	}
	w := l.pools[pool]
	if w == nil {
		w = &poolWalk{}
		l.pools[pool] = w
	}
	l.mu.Unlock()

	w.mu.Lock()
	defer w.mu.Unlock()
	now, period := l.now(), l.period()
	if v := w.view; v != nil && !v.Taken().Before(notBefore) && now.Sub(v.Taken()) < period {
		return v, nil
	}
	v, err := l.Juice.WalkPool(ctx, pool, now)
	if err != nil {
		return nil, err
	}
	w.view = v
	return v, nil
}

// ReadyRun is a ready reservation as the liveness watch sees it: where its session should be.
type ReadyRun struct {
	ID           uuid.UUID
	Pool         string
	SessionID    string
	AgentAddress string
	ReadyAt      time.Time
}

// Suspects compares the ready runs with a walk of each of their pools (at most one per Period) and returns those
// whose session is not plainly alive there: not held by an active agent, or ended; a pool whose walk fails is an
// error, and its runs are checked at the next call. Only those need a reconcile
// pass, in which checkLive decides; a run whose session is alive costs nothing, so 10,000 ready runs on a quiet
// cluster cost a walk of each pool per Period and no pass. A run that became ready after its pool's walk is left
// for the next one.
func (l *Liveness) Suspects(ctx context.Context, runs []ReadyRun) ([]uuid.UUID, error) {
	byPool := map[string][]ReadyRun{}
	for _, r := range runs {
		byPool[r.Pool] = append(byPool[r.Pool], r)
	}
	var out []uuid.UUID
	var errs []error
	for pool, rs := range byPool {
		// A walk younger than half a Period serves (one a reconcile pass just made); an older one would let a
		// session that ended go unnoticed for two Periods.
		view, err := l.View(ctx, pool, l.now().Add(-l.period()/2))
		if err != nil {
			// Checked again at the next period. Handing every run of the pool to the reconciler instead would
			// only have each of them fail on the same walk: at 100,000 ready runs one failed walk became 60,000
			// passes a minute.
			errs = append(errs, fmt.Errorf("pool %s (%d ready runs not checked this period): %w", pool, len(rs), err))
			continue
		}
		for _, r := range rs {
			if r.ReadyAt.After(view.Taken()) {
				continue
			}
			if h, ok := view.Find(r.SessionID); !ok || h.Session.Ended() || !h.Agent.Active {
				out = append(out, r.ID)
			}
		}
	}
	return out, errors.Join(errs...)
}

func (l *Liveness) period() time.Duration {
	if l.Period <= 0 {
		return 30 * time.Second
	}
	return l.Period
}

func (l *Liveness) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// checkLive decides on a ready reservation from its pool's view: alive (look again in ReadyCheck), ended by the
// controller, or lost because the agent holding it is no longer an active agent of the pool (the legacy
// controller keeps such sessions "active" for ever, so their own state says nothing).
func (rc *Reconciler) checkLive(ctx context.Context, log logr.Logger, r *Reservation) (Result, bool, error) {
	view, err := rc.Liveness.View(ctx, r.Request.Pool, r.Status.ReadyAt)
	if err != nil {
		return Result{}, true, fmt.Errorf("check session: %w", err)
	}
	sid := r.Status.SessionID
	h, seen := view.Find(sid)
	a, onAgent := h.Agent, seen
	if !seen {
		a, onAgent = view.AgentAt(r.Status.AgentAddress)
	}
	switch {
	case seen && h.Session.Ended():
		return Result{}, false, rc.apply(ctx, log, r, EventClosed, "the Juice Controller ended session "+sid+" while the job held it")
	case onAgent && !a.Active:
		return Result{}, false, rc.apply(ctx, log, r, EventClosed,
			fmt.Sprintf("lost: session %s is on agent %s (%s), which is %s at the Juice Controller", sid, a.ID, a.Address, a.State))
	case seen:
		return rc.checkAgain(), true, nil
	case !onAgent && view.Whole():
		return Result{}, false, rc.apply(ctx, log, r, EventClosed,
			fmt.Sprintf("lost: the agent at %s holding session %s is not an active agent of pool %s at the Juice Controller", r.Status.AgentAddress, sid, r.Request.Pool))
	}
	// Its agent is there without it (or the listing may be cut short): ask about the session itself.
	got, err := rc.Juice.GetSession(ctx, sid, r.Request)
	if errors.Is(err, ErrNoSession) || err == nil && got.Ended() {
		return Result{}, false, rc.apply(ctx, log, r, EventClosed, "the Juice Controller ended session "+sid+" while the job held it")
	}
	if err != nil {
		return Result{}, true, fmt.Errorf("check session: %w", err)
	}
	return rc.checkAgain(), true, nil
}

// checkAgain is when a ready run is looked at again: never by itself when the liveness watch runs (it enqueues the
// run once its pool's walk no longer shows the session alive), else in ReadyCheck.
func (rc *Reconciler) checkAgain() Result {
	if rc.Liveness != nil && rc.Liveness.Watched {
		return Result{}
	}
	return Result{RequeueAfter: rc.ReadyCheck}
}
