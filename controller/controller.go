// Package controller is the juice-slurm service at run time: the poller that watches slurmrestd, the work queue
// and reconcile passes that act on the Juice Controller, the leader lease, LISTEN/NOTIFY wake-ups, the sweep,
// and the hook API that the slurmctld prolog and epilog call.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
)

// Config tunes the controller; zero values take the defaults below.
type Config struct {
	// Cluster is Slurm's ClusterName; runs are keyed by it.
	Cluster string
	// PollInterval is the time between two listings of slurmrestd. Default 2s.
	PollInterval time.Duration
	// WaitPoll is how often a queued session is looked at. Default 1s, the legacy controller's tick.
	WaitPoll time.Duration
	// ReadyCheck is how often a ready session is checked to be alive. Default 30s.
	ReadyCheck time.Duration
	// Resync re-queues every open reservation, in case a wake-up was lost. Default 30s.
	Resync time.Duration
	// Sweep is how often sessions at the controller are checked against the runs. Default 5m; <0 turns it off.
	Sweep   time.Duration
	Workers int // default 4
	// LeaseTTL and LeaseRenew: see Elector. Defaults 15s and 5s.
	LeaseTTL, LeaseRenew time.Duration
	// Holder names this replica in the lease. Default host name and pid.
	Holder       string
	Lookahead    reconcile.Lookahead
	TrustComment bool
	// HookListen is the hook API's address. Default 127.0.0.1:7171.
	HookListen string
	// MaxHookWait caps one hook call's wait. Default 30s.
	MaxHookWait time.Duration
}

func (c *Config) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.PollInterval, 2*time.Second)
	set(&c.WaitPoll, time.Second)
	set(&c.ReadyCheck, 30*time.Second)
	set(&c.Resync, 30*time.Second)
	set(&c.Sweep, 5*time.Minute)
	set(&c.LeaseTTL, 15*time.Second)
	set(&c.LeaseRenew, 5*time.Second)
	set(&c.MaxHookWait, 30*time.Second)
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.HookListen == "" {
		c.HookListen = "127.0.0.1:7171"
	}
}

// Controller is one replica.
type Controller struct {
	Config  Config
	Store   *reconcile.PGStore
	Slurm   Slurm
	Juice   juiceapi.Client
	Key     []byte // the cluster key, for sealing session files
	Secret  []byte // the hook secret
	Log     logr.Logger
	Metrics *Metrics

	queue   atomic.Pointer[Queue[uuid.UUID]]
	crashed atomic.Bool // set by tests: stop as a killed replica would, leaving the lease to expire
	written sync.Map    // reservation id → the version of the reconciler's last write
	poller  atomic.Pointer[Poller]
	// Listener, when set, is used by the hook API instead of listening on HookListen (tests).
	Listener net.Listener
}

// Run serves until ctx ends, leading when it holds the lease.
func (c *Controller) Run(ctx context.Context) error {
	c.Config.defaults()
	if c.Metrics == nil {
		c.Metrics = NewMetrics(c.Store)
	}
	c.Juice = InstrumentJuice(c.Juice, c.Metrics)
	hub := &Hub{Pool: c.Store.Pool(), Log: c.Log.WithName("notify")}
	hub.OnAny(func(id uuid.UUID, version int64) {
		if p := c.poller.Load(); p != nil {
			p.Kick()
		}
		// The reconciler's own writes come back as notifications too; the pass that wrote has already
		// decided what comes next, so only other writers' changes (the poller, hooks, admins, other
		// replicas) need a pass.
		if v, ok := c.written.Load(id); ok && v.(int64) == version {
			return
		}
		if q := c.queue.Load(); q != nil {
			q.Add(id)
		}
	})
	api := &HookAPI{Store: c.Store, Hub: hub, Secret: c.Secret, Metrics: c.Metrics, Log: c.Log.WithName("hooks"),
		MaxWait: c.Config.MaxHookWait, Ready: func(ctx context.Context) error { return c.Store.Pool().Ping(ctx) }}
	ln := c.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", c.Config.HookListen); err != nil {
			return fmt.Errorf("hook API: %w", err)
		}
	}
	srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); hub.Run(ctx) }()
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.Log.Error(err, "hook API stopped")
		}
	}()
	holder := c.Config.Holder
	el := &Elector{Store: c.Store, Name: "reconciler/" + c.Config.Cluster, Holder: holder, TTL: c.Config.LeaseTTL,
		Renew: c.Config.LeaseRenew, Log: c.Log.WithName("lease"), OnLead: c.lead, Metrics: c.Metrics,
		KeepLease: c.crashed.Load}
	go func() { defer wg.Done(); el.Run(ctx) }()
	c.Log.Info("controller started", "cluster", c.Config.Cluster, "hookAPI", ln.Addr().String(), "holder", holder)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	wg.Wait()
	c.Log.Info("controller stopped")
	return nil
}

// lead runs the poller, the workers, the resync and the sweep while this replica holds the lease.
func (c *Controller) lead(ctx context.Context) {
	q := NewQueue[uuid.UUID](ctx, 200*time.Millisecond, time.Minute)
	c.queue.Store(q)
	defer c.queue.Store(nil)
	rc := &Reconciler{Store: c.Store, Juice: c.Juice, Key: c.Key, Log: c.Log.WithName("reconcile"), Metrics: c.Metrics,
		WaitPoll: c.Config.WaitPoll, ReadyCheck: c.Config.ReadyCheck,
		Saved: func(id uuid.UUID, version int64, final bool) {
			if final {
				c.written.Delete(id) // nothing more comes of it: keep the map as small as the open set
			} else {
				c.written.Store(id, version)
			}
		}}
	p := &Poller{Slurm: c.Slurm, Store: c.Store, Cluster: c.Config.Cluster, Lookahead: c.Config.Lookahead,
		TrustComment: c.Config.TrustComment, Log: c.Log.WithName("poll"), Metrics: c.Metrics, Enqueue: q.Add}
	c.poller.Store(p)
	defer c.poller.Store(nil)
	var wg sync.WaitGroup
	for i := 0; i < c.Config.Workers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); c.work(ctx, q, rc) }()
	}
	c.resync(ctx, q)
	poll := time.NewTicker(c.Config.PollInterval)
	resync := time.NewTicker(c.Config.Resync)
	var sweep <-chan time.Time
	if c.Config.Sweep > 0 {
		t := time.NewTicker(c.Config.Sweep)
		defer t.Stop()
		sweep = t.C
	}
	defer poll.Stop()
	defer resync.Stop()
	failing := 0
	for {
		err := p.Poll(ctx)
		c.Metrics.observePoll(err)
		switch {
		case err != nil && ctx.Err() == nil:
			failing++
			// Say it at once, then every tenth time, so a long outage of slurmrestd shows without flooding.
			if failing == 1 || failing%10 == 0 {
				c.Log.Error(err, "poll failed; retrying", "failuresInARow", failing)
			}
		case err == nil && failing > 0:
			c.Log.Info("poll works again", "after", failing)
			failing = 0
		}
		select {
		case <-ctx.Done():
			q.ShutDown()
			wg.Wait()
			return
		case <-poll.C:
		case <-resync.C:
			c.resync(ctx, q)
		case <-sweep:
			if err := Sweep(ctx, c.Store, c.Juice, c.Log.WithName("sweep")); err != nil {
				c.Log.Error(err, "sweep failed")
			}
		}
	}
}

func (c *Controller) resync(ctx context.Context, q *Queue[uuid.UUID]) {
	open, err := c.Store.Open(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.Log.Error(err, "resync")
		}
		return
	}
	for _, r := range open {
		q.Add(r.ID)
	}
}

func (c *Controller) work(ctx context.Context, q *Queue[uuid.UUID], rc *Reconciler) {
	for {
		id, ok := q.Get()
		if !ok {
			return
		}
		res, err := rc.Reconcile(ctx, id)
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, reconcile.ErrConflict):
			// Someone else wrote the row (the poller, a hook, a former leader): decide again on the fresh row.
			q.Add(id)
		case err != nil:
			n := q.Failures(id)
			if n == 0 || n%10 == 9 {
				c.Log.Error(err, "reconcile failed; retrying with backoff", "reservation", id, "failuresInARow", n+1)
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
