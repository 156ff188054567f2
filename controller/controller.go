// Package controller is the juice-slurm service at run time: it holds the configuration, builds the services and
// starts and stops them. Every replica serves the hook API (package hookserver) from PostgreSQL; the replica that
// holds the leader lease (leader.Elector) also runs a term of leading (leader.Term):
//
//   - the Poller, which observes slurmrestd and records what it sees and wants in each reservation's spec;
//   - the reconcile workers, which run the reconcile.Reconciler, the one actor on the Juice Controller;
//   - the job actor (package jobactor), the one actor on Slurm's jobs (a requeued run begins at once when its
//     session is ready);
//   - the sweep (package sweep), which cancels sessions that belong to no live run;
//   - with Licenses on, the license sync (package licenses), which keeps each pool's Slurm license at what the
//     pool can give this cluster.
//
// The actors hear of changes through PostgreSQL's NOTIFY (package notify), re-list after every (re)subscribe,
// and re-list on a timer as a last resort.
package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/juice-slurm/juice-slurm/controller/hookserver"
	"github.com/juice-slurm/juice-slurm/controller/jobactor"
	"github.com/juice-slurm/juice-slurm/controller/juiceport"
	"github.com/juice-slurm/juice-slurm/controller/leader"
	"github.com/juice-slurm/juice-slurm/controller/licenses"
	"github.com/juice-slurm/juice-slurm/controller/notify"
	"github.com/juice-slurm/juice-slurm/controller/sweep"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// Config tunes the controller; zero values take the defaults below.
type Config struct {
	// Cluster is Slurm's ClusterName; runs are keyed by it.
	Cluster string
	// Unmunge is the path of unmunge, for POST /v1/mine (a user's own runs); empty: that call is off.
	Unmunge string
	// PollInterval is the time between two polls of slurmrestd. Default 2s. A poll lists the queue, or (API
	// v0.0.40+, between listings paced by ListPace) asks only the states of the open reservations' jobs.
	PollInterval time.Duration
	// ListPace paces the full listings; zero values take DefaultListPace's.
	ListPace ListPace
	// WaitPoll is how often a queued session is looked at. Default 1s, the legacy controller's tick.
	WaitPoll time.Duration
	// HandoffWait is the longest an ended run's session waits for a like run, in the pools whose policy turns
	// hand-off on (reconcile.Handoff). Default reconcile.DefaultHandoffWait.
	HandoffWait time.Duration
	// ReadyCheck is how often the ready sessions are checked to be alive: a walk of each pool, compared with the
	// ready runs (reconcile.Liveness.Suspects). Default 30s.
	ReadyCheck time.Duration
	// Resync re-queues every open reservation that is not steady (ready, wanted, nothing to do), in case a wake-up
	// was lost. Default 30s.
	Resync time.Duration
	// FullResync re-queues every open reservation, steady ones too. Default 1h: at 100,000 runs it is 100,000
	// passes, and steady runs need none (the liveness watch looks after them; a reconnect of the hub re-lists all).
	FullResync time.Duration
	// Sweep is how often sessions at the controller are checked against the runs. Default 5m; <0 turns it off.
	Sweep   time.Duration
	Workers int // default 4
	// LeaseTTL and LeaseRenew: see leader.Elector. Defaults 15s and 5s.
	LeaseTTL, LeaseRenew time.Duration
	// Holder names this replica in the lease. Default host name and pid.
	Holder       string
	Lookahead    reconcile.Lookahead
	TrustComment bool
	// HookListen is the hook API's address. Default 127.0.0.1:7171.
	HookListen string
	// HookSocket, when set, is a Unix socket on which the hook API is served too, for the hooks of a slurmctld on
	// this host (hook-url = unix:PATH): no TLS handshake, each end proved by the kernel (hookapi.DialUnix). Its
	// directory must exist, owned by this process's user or root, writable by its owner only.
	HookSocket string
	// HookSocketUIDs may call on HookSocket besides root and this process's own uid: SlurmUser's, whose
	// slurmctld runs the hooks.
	HookSocketUIDs []uint32
	// MetricsListen is the address of /metrics (with /healthz and /readyz), apart from the hook API so that
	// scrapes and probes can be let through a firewall the hooks' port is not. Default: the hook API's host with
	// its port + 1000 (127.0.0.1:8171); "none" serves no metrics.
	MetricsListen string
	// MaxHookWait caps one hook call's wait. Default 30s.
	MaxHookWait time.Duration
	// Policy is the site's limits on requests (juice-policy.conf); nil: the grammar's bounds only.
	Policy *policy.Policy
	// StateDir is the shared state directory where the prologs write session files, when it is on this host
	// ("": not): the leader removes a run's file when its reservation stops being ready, and the sweep removes
	// every file no ready reservation owns.
	StateDir string
	// Retention is how long the reservations of runs that ended are kept (with their events); the leader prunes
	// older ones when it starts leading and every PruneInterval. Default 30 days; <0 keeps them for ever. It
	// must exceed the cluster's longest job time limit (see store.Prune).
	Retention time.Duration
	// PruneInterval: default 1h.
	PruneInterval time.Duration
	// HookTLS, when set, makes the hook API serve TLS (hookapi.ServerTLS): the hooks send their secret only to a
	// listener that proves it holds the key of the certificate they pin. Nil serves plain HTTP (tests).
	HookTLS *tls.Config
	// Licenses keeps each pool's Slurm license juice_<pool>@juice in slurmdbd at what the pool can give this
	// cluster, every ReadyCheck while leading (package licenses); job_submit.lua gives the jobs those licenses
	// (JUICE_LICENSES in juice-config.sh). Needs accounting (slurmdbd). The pools are Policy's; without any, the
	// Juice licenses slurmdbd already holds for the cluster.
	Licenses bool
	// Sacctmgr is the path of sacctmgr, which writes the licenses. Default /usr/bin/sacctmgr.
	Sacctmgr string
	// CapsQOS are the QOS on which the license sync keeps Policy's max_gpus_per_user as Slurm limits
	// (licenses.Caps), with Licenses on; none: the caps are the controller's alone.
	CapsQOS []string
	// MaxHookConns and MaxHookConnsPerPeer cap the hook API's connections, in all and per peer (package peer);
	// MaxWaitsPerPeer caps a peer's concurrent calls. Defaults hookserver.DefaultMaxConns, DefaultMaxConnsPerPeer
	// and DefaultMaxWaitsPerPeer.
	MaxHookConns, MaxHookConnsPerPeer, MaxWaitsPerPeer int
}

// DefaultRetention is how long ended runs are kept by default.
const DefaultRetention = 30 * 24 * time.Hour

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
	set(&c.FullResync, time.Hour)
	set(&c.Sweep, 5*time.Minute)
	set(&c.LeaseTTL, 15*time.Second)
	set(&c.LeaseRenew, 5*time.Second)
	set(&c.MaxHookWait, 30*time.Second)
	set(&c.Retention, DefaultRetention)
	set(&c.PruneInterval, time.Hour)
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.HookListen == "" {
		c.HookListen = "127.0.0.1:7171"
	}
	if c.Sacctmgr == "" {
		c.Sacctmgr = "/usr/bin/sacctmgr"
	}
}

// MetricsAddr is the default metrics address for a hook API address: the same host, the port + 1000 (port 0, a
// free port, stays 0).
func MetricsAddr(hookListen string) (string, error) {
	host, port, err := net.SplitHostPort(hookListen)
	if err != nil {
		return "", fmt.Errorf("hook address %q: %w", hookListen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535-1000 {
		return "", fmt.Errorf("hook address %q: port %q has no metrics port 1000 above it: set the metrics address", hookListen, port)
	}
	if p != 0 {
		p += 1000
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// Tuning is what may change while a replica runs (Controller.Retune, on SIGHUP). Everything else in Config takes
// a restart: the cluster, the addresses and the trust of comments decide who this replica is and whom it believes.
type Tuning struct {
	PollInterval time.Duration
	Lookahead    reconcile.Lookahead
	// Sweep is how often orphaned sessions are swept; <0 turns the sweep off.
	Sweep time.Duration
}

// Controller is one replica.
type Controller struct {
	Config Config
	Store  *store.Store
	Slurm  Slurm
	Juice  juiceapi.Client
	Key    session.KeySource // the cluster key, for sealing session files
	Secret *secretfile.File  // the hook secret
	// Ender requeues or cancels a job whose run lost its session (nil: logged only).
	Ender   jobactor.Ender
	Log     logr.Logger
	Metrics *Metrics
	// Listener, when set, is used by the hook API instead of listening on HookListen (tests).
	Listener net.Listener
	// MetricsListener, when set, is used for /metrics instead of listening on MetricsListen (tests).
	MetricsListener net.Listener

	crashed atomic.Bool // set by tests: stop as a killed replica would, leaving the lease to expire
	tuning  atomic.Pointer[Tuning]
	health  health
	retuned chan struct{} // wakes the leader's loop after Retune
	// listen, when set, replaces the hub's LISTEN connection (tests hold a reconnect back with it).
	listen func(ctx context.Context) (*pgx.Conn, error)
	// strands watches the state directory for stranded runs between two looks (endStranded).
	strandsMu sync.Mutex
	strands   sweep.Strands
}

// Run serves until ctx ends, leading when it holds the lease.
func (c *Controller) Run(ctx context.Context) error {
	c.Config.defaults()
	c.retuned = make(chan struct{}, 1)
	c.tuning.Store(&Tuning{PollInterval: c.Config.PollInterval, Lookahead: c.Config.Lookahead, Sweep: c.Config.Sweep})
	if c.Metrics == nil {
		c.Metrics = NewMetrics(c.Store)
	}
	c.Metrics.SetPolicy(c.Config.Policy)
	c.Juice = observedJuice{c.Juice, func(op string, start time.Time, err error) {
		c.Metrics.observeJuice(op, start, err)
		c.health.noteJuice(err)
	}}
	hub := &notify.Hub{Pool: c.Store.Pool(), Cluster: c.Config.Cluster, Log: c.Log.WithName("notify"), Connect: c.listen}
	trust := c.Config.TrustComment
	hooks := &hookserver.Server{Store: c.Store, Hub: hub, Jobs: c.Slurm, Secret: c.Secret, Metrics: c.Metrics,
		Log: c.Log.WithName("hooks"), MaxWait: c.Config.MaxHookWait, Ready: c.ready, Unmunge: c.Config.Unmunge,
		JobRequest:      func(j *slurmrest.Job) (request.Request, error) { return JobRequest(j, trust) },
		MaxWaitsPerPeer: c.Config.MaxWaitsPerPeer, MaxConns: c.Config.MaxHookConns,
		MaxConnsPerPeer: c.Config.MaxHookConnsPerPeer, TLS: c.Config.HookTLS}
	ln := c.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", c.Config.HookListen); err != nil {
			return fmt.Errorf("hook API: %w", err)
		}
	}
	ln = hooks.Listen(ln)
	sln, err := c.hookSocket(hooks)
	if err != nil {
		ln.Close()
		return err
	}
	mln, err := c.metricsListener()
	if err != nil {
		ln.Close()
		if sln != nil {
			sln.Close()
		}
		return err
	}
	srv := hooks.HTTPServer()
	msrv := &http.Server{Handler: c.probeHandler(), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	if mln != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := msrv.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				c.Log.Error(err, "metrics listener stopped")
			}
		}()
	}
	wg.Add(3)
	go func() { defer wg.Done(); hub.Run(ctx) }()
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.Log.Error(err, "hook API stopped")
		}
	}()
	if sln != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The same server: its Shutdown closes this listener too.
			if err := srv.Serve(sln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				c.Log.Error(err, "hook API socket stopped")
			}
		}()
	}
	el := &leader.Elector{Leases: c.Store, Name: "reconciler/" + c.Config.Cluster, Holder: c.Config.Holder,
		TTL: c.Config.LeaseTTL, Renew: c.Config.LeaseRenew, Log: c.Log.WithName("lease"),
		OnLead: func(ctx context.Context) { c.lead(ctx, hub) }, Leading: c.setLeading, KeepLease: c.crashed.Load}
	go func() { defer wg.Done(); el.Run(ctx) }()
	metricsAt := "none"
	if mln != nil {
		metricsAt = mln.Addr().String()
	}
	c.Log.Info("controller started", "cluster", c.Config.Cluster, "hookAPI", ln.Addr().String(), "metrics", metricsAt,
		"holder", c.Config.Holder)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	_ = msrv.Shutdown(sctx)
	wg.Wait()
	c.Log.Info("controller stopped")
	return nil
}

// Retune changes what may change at run time; the leader applies it at once (it polls right away with it). A
// zero PollInterval or Sweep keeps the current value. Safe to call from any goroutine while Run runs.
func (c *Controller) Retune(t Tuning) error {
	cur := c.tuning.Load()
	if cur == nil {
		return errors.New("retune: the controller is not running")
	}
	if t.PollInterval == 0 {
		t.PollInterval = cur.PollInterval
	}
	if t.Sweep == 0 {
		t.Sweep = cur.Sweep
	}
	if t.PollInterval < 0 {
		return fmt.Errorf("retune: poll interval %s is negative", t.PollInterval)
	}
	if t.Lookahead.PerPool < 0 || t.Lookahead.PerUser < 0 || t.Lookahead.PerAccount < 0 || t.Lookahead.Window < 0 {
		return fmt.Errorf("retune: look-ahead of %d per pool within %s: neither may be negative", t.Lookahead.PerPool, t.Lookahead.Window)
	}
	c.tuning.Store(&t)
	select {
	case c.retuned <- struct{}{}:
	default:
	}
	c.Log.Info("retuned", "pollInterval", t.PollInterval.String(), "lookaheadPerPool", t.Lookahead.PerPool,
		"lookaheadPerUser", t.Lookahead.PerUser, "lookaheadPerAccount", t.Lookahead.PerAccount,
		"lookaheadWindow", t.Lookahead.Window.String(), "sweepInterval", t.Sweep.String())
	return nil
}

// Tuning is what the replica runs with now.
func (c *Controller) Tuning() Tuning {
	if t := c.tuning.Load(); t != nil {
		return *t
	}
	return Tuning{PollInterval: c.Config.PollInterval, Lookahead: c.Config.Lookahead, Sweep: c.Config.Sweep}
}

// health is what /readyz reports beyond the database: the leader's last word from slurmrestd and from Juice, and
// its last license sync's (a warning only: licenses never hold back the hooks).
type health struct {
	mu           sync.Mutex
	leading      bool
	slurm, juice error
	licenses     error
}

func (h *health) set(which *error, err error) {
	h.mu.Lock()
	*which = err
	h.mu.Unlock()
}

// setLeading records leadership for /readyz and the metrics; a new term starts with no word from either service.
func (c *Controller) setLeading(on bool) {
	c.health.mu.Lock()
	c.health.leading, c.health.slurm, c.health.juice, c.health.licenses = on, nil, nil, nil
	c.health.mu.Unlock()
	c.Metrics.setLeader(on)
}

// ready is /readyz: every replica needs the database (it serves the hooks from it); the leader also needs
// slurmrestd (its last poll worked) and the Juice Controller (its last call reached it and was let in).
func (c *Controller) ready(ctx context.Context) error {
	if err := c.Store.Pool().Ping(ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	c.health.mu.Lock()
	defer c.health.mu.Unlock()
	if !c.health.leading {
		return nil
	}
	if c.health.slurm != nil {
		return fmt.Errorf("leader: slurmrestd: %w", c.health.slurm)
	}
	if c.health.juice != nil {
		return fmt.Errorf("leader: Juice Controller: %w", c.health.juice)
	}
	return nil
}

// warning is what /readyz adds to a ready answer: the leader's last license sync, when it failed.
func (c *Controller) warning() string {
	c.health.mu.Lock()
	defer c.health.mu.Unlock()
	if c.health.leading && c.health.licenses != nil {
		return "leader: licenses: " + c.health.licenses.Error()
	}
	return ""
}

// noteJuice notes whether the Juice Controller can be reached: a call that could not get through, or was not let
// in, makes the leader unready; any answer (even "not found" or "no capacity") makes it ready again.
func (h *health) noteJuice(err error) {
	if err != nil && !errors.Is(err, juiceapi.ErrUnavailable) && !errors.Is(err, juiceapi.ErrUnauthorized) {
		err = nil
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	h.set(&h.juice, err)
}

// probeHandler serves /metrics, /healthz and /readyz: the metrics listener, apart from the hook API.
func (c *Controller) probeHandler() http.Handler {
	mux := http.NewServeMux()
	hookserver.Probes(mux, c.ready, c.warning)
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.Metrics.Registry, promhttp.HandlerOpts{}))
	return mux
}

// metricsListener listens for /metrics; nil when metrics are off.
func (c *Controller) metricsListener() (net.Listener, error) {
	if c.MetricsListener != nil {
		return c.MetricsListener, nil
	}
	addr := c.Config.MetricsListen
	switch addr {
	case "none":
		return nil, nil
	case "":
		var err error
		if addr, err = MetricsAddr(c.Config.HookListen); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	return ln, nil
}

// lead runs one term of leading (leader.Term) while this replica holds the lease: the poller, the actors, the
// re-lists, the sweep and the prune.
func (c *Controller) lead(ctx context.Context, hub *notify.Hub) {
	term := &leader.Term{Store: c.Store, Hub: hub, Log: c.Log, Metrics: c.Metrics, Workers: c.Config.Workers,
		Tuning: func() (time.Duration, time.Duration) {
			t := c.Tuning()
			return t.PollInterval, t.Sweep
		},
		Retuned: c.retuned, Resync: c.Config.Resync, FullResync: c.Config.FullResync, ReadyCheck: c.Config.ReadyCheck,
		Retention: c.Config.Retention, PruneInterval: c.Config.PruneInterval, Sweep: c.sweep, SweepFiles: c.sweepFiles,
		LookStranded: c.lookStranded(), StrandedEvery: reconcile.StrandedAfter / 2,
		Actors: func(enqueue func(uuid.UUID)) leader.Actors {
			p := &Poller{Slurm: c.Slurm, Store: c.Store, Cluster: c.Config.Cluster, Lookahead: c.Config.Lookahead,
				Handoff: c.Config.Policy.Handoff, Pace: c.Config.ListPace, TrustComment: c.Config.TrustComment,
				Log: c.Log.WithName("poll"), Metrics: c.Metrics, Enqueue: enqueue}
			ja := c.jobActor()
			juice := juiceport.New(c.Juice)
			rc := &reconcile.Reconciler{Store: c.Store, Juice: juice, Key: c.Key, Log: c.Log.WithName("reconcile"),
				WaitPoll: c.Config.WaitPoll, ReadyCheck: c.Config.ReadyCheck, OnReady: c.Metrics.observeReady, Policy: c.Config.Policy,
				Liveness: &reconcile.Liveness{Juice: juice, Period: c.Config.ReadyCheck, Watched: true}}
			rc.OnFreed = func(ctx context.Context, pool string) { c.hastenQueued(ctx, pool, rc, enqueue) }
			rc.Handoff = &reconcile.Handoff{Followers: p.Followers, Wait: c.Config.HandoffWait}
			rc.OnHandoff = c.Metrics.observeHandoff
			if c.Config.StateDir != "" {
				rc.Files = &session.StateDir{Path: c.Config.StateDir}
			}
			return leader.Actors{Poller: &termPoller{Poller: p, c: c, lookahead: c.Tuning().Lookahead},
				Reconciler: rc, Liveness: rc.Liveness, Jobs: ja}
		}, Licenses: c.licenseSync()}
	term.Run(ctx)
}

// hastenQueued hands the pool's oldest runs whose sessions are queued at the Juice Controller to the reconciler at
// once, to be looked at often until the scheduler's next tick (Reconciler.Hasten): the pool has GPUs back, and each
// would otherwise be looked at only at its next WaitPoll. The oldest few only: the scheduler places the oldest
// first, and a release frees one run's GPUs. A failure to list them costs only that wait.
func (c *Controller) hastenQueued(ctx context.Context, pool string, rc *reconcile.Reconciler, enqueue func(uuid.UUID)) {
	ids, err := c.Store.QueuedIn(ctx, pool, hastenQueued)
	if err != nil {
		c.Log.Error(err, "look at the queued runs of a pool that has GPUs back", "pool", pool)
		return
	}
	rc.Hasten(ids...)
	for _, id := range ids {
		enqueue(id)
	}
}

// hastenQueued is how many of a pool's queued runs a release hastens.
const hastenQueued = 4

// licenseSync is what keeps the licenses for a term, when Licenses is on (nil when off: a term then never runs
// sacctmgr).
func (c *Controller) licenseSync() func(ctx context.Context) {
	if !c.Config.Licenses {
		return nil
	}
	return c.licenseSyncer().Run
}

// licenseSyncer is one term's license sync: the policy's pools and per-user caps, written with sacctmgr, its
// outcome in /readyz.
func (c *Controller) licenseSyncer() *licenses.Syncer {
	var pools []string
	if c.Config.Policy != nil {
		pools = c.Config.Policy.Pools
	}
	caps := licenses.Caps{QOS: c.Config.CapsQOS, PerUser: map[string]int{}}
	if c.Config.Policy != nil {
		for pool, l := range c.Config.Policy.PoolLimits {
			if l.MaxGPUsPerUser > 0 {
				caps.PerUser[strings.ToLower(pool)] = l.MaxGPUsPerUser
			}
		}
	}
	return &licenses.Syncer{Cluster: c.Config.Cluster, Pools: pools, Juice: c.Juice, Store: c.Store, Caps: caps,
		Sacctmgr: licenses.Exec{Path: c.Config.Sacctmgr}, Log: c.Log.WithName("licenses"), Metrics: c.Metrics,
		Health: func(err error) { c.health.set(&c.health.licenses, err) }, Period: c.Config.ReadyCheck}
}

// termPoller is the poller as a term drives it: a retuned look-ahead applies before the next poll, and each
// poll's outcome goes to the metrics and to /readyz.
type termPoller struct {
	*Poller
	c         *Controller
	lookahead reconcile.Lookahead // the tuning's, as of the last poll
}

func (t *termPoller) Poll(ctx context.Context) error {
	if la := t.c.Tuning().Lookahead; la != t.lookahead {
		t.lookahead = la
		t.Poller.Lookahead = la
		t.Kick() // the listing may not have changed, but what is selected from it has
	}
	err := t.Poller.Poll(ctx)
	t.c.Metrics.observePoll(err)
	if ctx.Err() == nil {
		t.c.health.set(&t.c.health.slurm, err)
	}
	return err
}

// sweep cancels the orphaned sessions and removes the stale session files, at each sweep interval while leading.
func (c *Controller) sweep(ctx context.Context) {
	n, err := sweep.Sessions(ctx, c.Store, juiceport.New(c.Juice), c.Log.WithName("sweep"))
	c.Metrics.observeSweep(n, err)
	if err != nil {
		c.Log.Error(err, "sweep failed")
	}
	c.sweepFiles(ctx)
}

// jobActor is a new actor on Slurm's jobs (jobactor.Actor): each term's, and the stranded runs' ender.
func (c *Controller) jobActor() *jobactor.Actor {
	return &jobactor.Actor{Store: c.Store, Slurm: c.Slurm, Log: c.Log.WithName("jobs"), Metrics: c.Metrics, Ender: c.Ender}
}

// sweepFiles removes the stale session files of the state directory, when it is on this host.
func (c *Controller) sweepFiles(ctx context.Context) {
	if c.Config.StateDir == "" {
		return
	}
	dir := &session.StateDir{Path: c.Config.StateDir}
	if _, err := sweep.Files(ctx, c.Store, dir, c.Log.WithName("sweep")); err != nil {
		c.Log.Error(err, "sweep of the state directory failed")
	}
}

// lookStranded is the leader's look for stranded runs, when the state directory is on this host (nil when it is
// not): runs Slurm runs without their session file (reconcile.Stranded) end as runs that lost their session.
// Looked at every half StrandedAfter, a stranded job ends within one and a half StrandedAfter of the first look
// that saw it run without its file.
func (c *Controller) lookStranded() func(ctx context.Context) {
	if c.Config.StateDir == "" {
		return nil
	}
	return c.endStranded
}

func (c *Controller) endStranded(ctx context.Context) {
	dir := &session.StateDir{Path: c.Config.StateDir}
	c.strandsMu.Lock()
	defer c.strandsMu.Unlock()
	wasProven := c.strands.Proven()
	stranded, proven, err := c.strands.Look(ctx, c.Store, dir, time.Now())
	if err != nil {
		c.Log.Error(err, "look for stranded runs failed")
		return
	}
	if proven && !wasProven {
		c.Log.Info("the state directory is the hooks' (their mark, or a running job's file there): runs without theirs are looked for",
			"stateDir", c.Config.StateDir)
	}
	ja := c.jobActor()
	for _, t := range stranded {
		c.Log.Info("a run's job runs without its session file: ending it", "job", t.Run.JobID, "run", t.Run.Run,
			"reservation", t.ID, "missingFor", reconcile.StrandedAfter.String()+" or more")
		if err := ja.EndStranded(ctx, t.ID); err != nil {
			c.Log.Error(err, "cannot end a stranded run's job", "job", t.Run.JobID, "run", t.Run.Run)
		}
	}
}

// hookSocket listens on Config.HookSocket (nil when it is not set). A socket left by an earlier process is
// replaced; any other file there is an error. The socket is open to every local user (0666): who may call is
// decided by the caller's uid (hookserver.ListenLocal), and the secret is still asked.
func (c *Controller) hookSocket(hooks *hookserver.Server) (net.Listener, error) {
	path := c.Config.HookSocket
	if path == "" {
		return nil, nil
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("hook socket %s: a file that is not a socket is in the way", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("hook socket %s: remove the one an earlier process left: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("hook socket: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("hook socket: %w", err)
	}
	self := uint32(os.Getuid())
	allowed := func(uid uint32) bool { return uid == 0 || uid == self || slices.Contains(c.Config.HookSocketUIDs, uid) }
	c.Log.Info("hook API on a Unix socket too", "path", path, "uids", append([]uint32{0, self}, c.Config.HookSocketUIDs...))
	return hooks.ListenLocal(ln, allowed), nil
}
