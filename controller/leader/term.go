package leader

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/controller/notify"
	"github.com/juice-slurm/juice-slurm/controller/queue"
	"github.com/juice-slurm/juice-slurm/internal/backoff"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

// Store is what a term reads and prunes of the reservations (store.Store).
type Store interface {
	OpenIDs(ctx context.Context, all bool) ([]uuid.UUID, error)
	Ready(ctx context.Context) ([]reconcile.ReadyRun, error)
	Prune(ctx context.Context, cutoff time.Time) (int64, error)
}

// Hub tells a term of the reservations' changes and of each (re)subscribe (notify.Hub).
type Hub interface {
	OnChange(f func(notify.Change)) (remove func())
	OnConnect(f func()) (remove func())
}

// Metrics counts what a term does (controller.Metrics).
type Metrics interface {
	ObserveReconcile(start time.Time, err error)
	ObservePrune(n int64, err error)
	// LeadQueues exports the depths of the term's queues until the returned func is called.
	LeadQueues(lengths map[string]func() int) (stop func())
}

// Poller observes Slurm (controller.Poller): Poll once per poll interval, Kick to compare at the next poll even
// if Slurm did not change.
type Poller interface {
	Poll(ctx context.Context) error
	Kick()
}

// Reconciler is the one actor on the Juice Controller (reconcile.Reconciler).
type Reconciler interface {
	Reconcile(ctx context.Context, id uuid.UUID) (reconcile.Result, error)
}

// Liveness finds the ready runs whose session is not plainly alive (reconcile.Liveness).
type Liveness interface {
	Suspects(ctx context.Context, runs []reconcile.ReadyRun) ([]uuid.UUID, error)
}

// JobActor is the one actor on Slurm's jobs (jobactor.Actor).
type JobActor interface {
	Act(ctx context.Context, id uuid.UUID) error
	// Moves says whether a reconciler's move of id into state can give the actor something to do.
	Moves(id uuid.UUID, state reconcile.State) bool
}

// Actors are what one term drives, made afresh for each term.
type Actors struct {
	Poller     Poller
	Reconciler Reconciler
	Liveness   Liveness
	Jobs       JobActor
}

// Term is what this replica runs while it holds the lease (Elector.OnLead): the poller, the reconcile workers
// and the job actor, each fed by a work queue of its own from the hub's changes and from re-lists, the liveness
// watch of the ready runs, the sweep and the prune. Every field is required, except as noted.
type Term struct {
	Store   Store
	Hub     Hub
	Log     logr.Logger
	Metrics Metrics
	// Actors makes the term's actors; enqueue hands a reservation to the reconciler.
	Actors  func(enqueue func(uuid.UUID)) Actors
	Workers int // reconcile workers
	// Tuning is the poll and sweep intervals now (a sweep interval <= 0: no sweep); Retuned wakes the term to
	// apply a change at once, between two polls.
	Tuning  func() (poll, sweep time.Duration)
	Retuned <-chan struct{}
	// Resync re-lists the open reservations that are not steady, FullResync all of them, ReadyCheck checks the
	// ready runs against their pools.
	Resync, FullResync, ReadyCheck time.Duration
	// Retention > 0 prunes the runs that ended longer ago, now and every PruneInterval.
	Retention, PruneInterval time.Duration
	// Sweep sweeps the orphaned sessions and the stale session files at each sweep interval; SweepFiles sweeps
	// the files alone, when the term starts.
	Sweep, SweepFiles func(ctx context.Context)
	// LookStranded, when set, looks for stranded runs (Controller.lookStranded) at once and every StrandedEvery:
	// apart from the sweep, whose interval (5 minutes by default) would leave a job Slurm stranded running for
	// up to 11 minutes.
	LookStranded  func(ctx context.Context)
	StrandedEvery time.Duration
	// Licenses, when set, keeps the pools' Slurm licenses for the whole term (licenses.Syncer.Run): only the
	// leader writes them.
	Licenses func(ctx context.Context)
}

// retries is the work queues' backoff for a key whose pass failed.
var retries = backoff.Policy{Base: 200 * time.Millisecond, Max: time.Minute}

// Run leads until ctx ends (the lease is lost or the replica stops).
func (t *Term) Run(ctx context.Context) {
	rq := queue.New[uuid.UUID](ctx, retries) // the reconciler's
	jq := queue.New[uuid.UUID](ctx, retries) // the job actor's
	defer t.Metrics.LeadQueues(map[string]func() int{
		"reconcile": func() int { return rq.Len() + rq.Waiting() },
		"jobs":      func() int { return jq.Len() + jq.Waiting() },
	})()
	a := t.Actors(rq.Add)
	// Each actor hears of the changes it acts on: the reconciler of what observers want (its own status writes
	// need no second pass), the job actor of what Slurm says and of the reconciler's moves.
	defer t.Hub.OnChange(func(ch notify.Change) {
		switch ch.Kind {
		case store.KindCreated:
			a.Poller.Kick()
			rq.Add(ch.ID)
		case store.KindSpec:
			rq.Add(ch.ID)
		case store.KindObserved:
			jq.Add(ch.ID)
		case store.KindStatus:
			if a.Jobs.Moves(ch.ID, ch.State) {
				jq.Add(ch.ID)
			}
		}
	})()
	relist := func() { t.relist(ctx, true, rq, jq) }
	// Whatever changed while LISTEN was down was not announced: re-list after every (re)subscribe.
	relisting := make(chan struct{}, 1)
	defer t.Hub.OnConnect(func() {
		select {
		case relisting <- struct{}{}:
		default:
		}
	})()
	var wg sync.WaitGroup
	for i := 0; i < t.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(ctx, t.Log, rq, "reconcile", t.Metrics.ObserveReconcile, a.Reconciler.Reconcile)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		work(ctx, t.Log, jq, "act on the job", nil, func(ctx context.Context, id uuid.UUID) (reconcile.Result, error) {
			return reconcile.Result{}, a.Jobs.Act(ctx, id)
		})
	}()
	if t.Retention > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); every(ctx, t.PruneInterval, t.prune) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); t.watchReady(ctx, a.Liveness, rq) }()
	if t.LookStranded != nil {
		wg.Add(1)
		go func() { defer wg.Done(); every(ctx, t.StrandedEvery, t.LookStranded) }()
	}
	if t.Licenses != nil {
		wg.Add(1)
		go func() { defer wg.Done(); t.Licenses(ctx) }()
	}
	relist()
	t.SweepFiles(ctx)
	pollEvery, sweepEvery := t.Tuning()
	poll := time.NewTicker(pollEvery)
	resync := time.NewTicker(t.Resync)
	full := time.NewTicker(t.FullResync)
	sweep := newSweepTicker(sweepEvery)
	defer poll.Stop()
	defer resync.Stop()
	defer full.Stop()
	defer func() { sweep.stop() }()
	failing := 0
	for {
		// A retune takes effect here, between two polls: the poller is not running.
		if p, s := t.Tuning(); p != pollEvery || s != sweepEvery {
			if p != pollEvery {
				poll.Reset(p)
			}
			if s != sweepEvery {
				sweep.stop()
				sweep = newSweepTicker(s)
			}
			pollEvery, sweepEvery = p, s
		}
		err := a.Poller.Poll(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			failing++
			// Say it at once, then every tenth time, so a long outage of slurmrestd shows without flooding.
			if failing == 1 || failing%10 == 0 {
				t.Log.Error(err, "poll failed; retrying", "failuresInARow", failing)
			}
		case err == nil && failing > 0:
			t.Log.Info("poll works again", "after", failing)
			failing = 0
		}
		if !t.waitForPoll(ctx, poll.C, resync.C, full.C, sweep.c, relisting, relist, func() { t.relist(ctx, false, rq, jq) }) {
			rq.ShutDown()
			jq.ShutDown()
			wg.Wait()
			return
		}
	}
}

// waitForPoll waits until the next poll is due, re-listing and sweeping meanwhile when those are due; false
// when ctx ended.
func (t *Term) waitForPoll(ctx context.Context, poll, resync, full, sweep <-chan time.Time, relisting <-chan struct{},
	relist, relistUnsettled func()) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-poll:
			return true
		case <-t.Retuned:
			return true
		case <-relisting:
			relist()
		case <-resync:
			relistUnsettled()
		case <-full:
			relist()
		case <-sweep:
			t.Sweep(ctx)
		}
	}
}

// prune deletes the runs that ended more than the retention ago (the term calls it now and every PruneInterval).
func (t *Term) prune(ctx context.Context) {
	n, err := t.Store.Prune(ctx, time.Now().Add(-t.Retention))
	t.Metrics.ObservePrune(n, err)
	switch {
	case err != nil && ctx.Err() == nil:
		t.Log.Error(err, "prune the runs that ended", "retention", t.Retention.String())
	case n > 0:
		t.Log.Info("pruned the runs that ended", "reservations", n, "retention", t.Retention.String())
	}
}

// every calls f now and at every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func(ctx context.Context)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sweepTicker ticks every interval, or never when the interval is not positive.
type sweepTicker struct {
	c    <-chan time.Time
	stop func()
}

func newSweepTicker(every time.Duration) sweepTicker {
	if every <= 0 {
		return sweepTicker{stop: func() {}}
	}
	t := time.NewTicker(every)
	return sweepTicker{c: t.C, stop: t.Stop}
}

// relist hands every open reservation (all: steady ones too) to both actors.
func (t *Term) relist(ctx context.Context, all bool, queues ...*queue.Queue[uuid.UUID]) {
	ids, err := t.Store.OpenIDs(ctx, all)
	if err != nil {
		if ctx.Err() == nil {
			t.Log.Error(err, "re-list the open reservations", "steadyToo", all)
		}
		return
	}
	for _, id := range ids {
		for _, q := range queues {
			q.Add(id)
		}
	}
}

// watchReady compares the ready runs with a walk of their pools every ReadyCheck and hands the reconciler those
// whose session is not plainly alive: a quiet cluster's ready runs cost a walk of each pool per period and no
// pass.
func (t *Term) watchReady(ctx context.Context, l Liveness, rq *queue.Queue[uuid.UUID]) {
	tick := time.NewTicker(t.ReadyCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		runs, err := t.Store.Ready(ctx)
		if err != nil {
			if ctx.Err() == nil {
				t.Log.Error(err, "list the ready runs to check their sessions")
			}
			continue
		}
		suspects, err := l.Suspects(ctx, runs)
		if err != nil && ctx.Err() == nil {
			t.Log.Error(err, "walk the pools of the ready runs; their runs are checked one by one")
		}
		for _, id := range suspects {
			rq.Add(id)
		}
		t.Log.V(1).Info("checked the ready runs against their pools", "ready", len(runs), "suspects", len(suspects))
	}
}

// work runs one actor's passes over the keys of q until it shuts down: a failed pass is retried with backoff, a
// conflicting write at once (on the fresh row), and a pass may ask to be run again after a while.
func work(ctx context.Context, log logr.Logger, q *queue.Queue[uuid.UUID], what string, observe func(time.Time, error),
	pass func(context.Context, uuid.UUID) (reconcile.Result, error)) {
	for {
		id, ok := q.Get()
		if !ok {
			return
		}
		start := time.Now()
		res, err := pass(ctx, id)
		if observe != nil {
			observe(start, err)
		}
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, reconcile.ErrConflict):
			// Another status write came first (a former leader's last pass): decide again on the fresh row.
			q.Add(id)
		case err != nil:
			n := q.Failures(id)
			if n == 0 || n%10 == 9 {
				log.Error(err, what+" failed; retrying with backoff", "reservation", id, "failuresInARow", n+1)
			}
			q.AddRateLimited(id)
		default:
			q.Forget(id)
			if res.RequeueAfter > 0 {
				q.AddAfter(id, res.RequeueAfter)
			}
		}
		q.Done(id)
	}
}
