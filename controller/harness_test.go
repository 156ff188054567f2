package controller

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/juiceport"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
	"github.com/juice-slurm/juice-slurm/test/world"
)

// harness is one test's world (test/world): a fresh database the controller uses as the runtime role, an
// in-process simulator with one pool "test" of 2 agents with 4 GPUs of 80 GiB, instant scheduling, and a scripted
// Slurm, for cluster c1.
type harness struct {
	t         *testing.T
	dbURL     string // the runtime role's, as the controller has it
	pool      *pgxpool.Pool
	store     *store.Store
	sim       *juicesim.Server
	juice     *juiceapi.HTTPClient
	tokenFile string
	slurm     *fakeslurm.Slurm
	key       []byte
	secret    *secretfile.File
	log       logr.Logger
}

// hookSecret is what the hooks send: the world's hook secret.
var hookSecret = string(world.Secret)

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, juicesim.Legacy{})
}

// newHarnessWith is newHarness with the simulator behaving like the legacy controller where legacy says so.
// The client maps the pool name "test" to the controller's id, as an administrator configures it.
func newHarnessWith(t *testing.T, legacy juicesim.Legacy, tweaks ...func(*juicesim.Config)) *harness {
	t.Helper()
	cfg := juicesim.Config{Legacy: legacy, Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 2, 4, 80*vram.GiB)}}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	w := world.New(t, world.Config{Sim: &cfg, PoolIDs: true,
		Client: func(hc *juiceapi.HTTPConfig) {
			hc.MaxAttempts, hc.InitialBackoff, hc.Timeout = 3, 10*time.Millisecond, 5*time.Second
		}})
	return &harness{t: t, dbURL: w.DB.Runtime, pool: w.Pool, store: w.Store, sim: w.Sim, juice: w.Juice,
		tokenFile: w.TokenFile, slurm: w.Slurm, key: w.Key, secret: w.Secret,
		log: testr.NewWithOptions(t, testr.Options{Verbosity: 0})}
}

func (h *harness) reconciler(juice juiceapi.Client) *reconcile.Reconciler {
	if juice == nil {
		juice = h.juice
	}
	return &reconcile.Reconciler{Store: h.store, Juice: juiceport.New(juice), Key: session.StaticKey(h.key), Log: h.log,
		WaitPoll: 20 * time.Millisecond, ReadyCheck: time.Second}
}

// liveSessions are the simulator's sessions that still hold GPUs.
func (h *harness) liveSessions() []juiceapi.Session {
	var out []juiceapi.Session
	for _, s := range h.sim.Sim.Sessions() {
		if !s.Ended() {
			out = append(out, s)
		}
	}
	return out
}

// startController runs a replica of cluster c1 on the harness's database until the returned stop is called;
// crash=true leaves its lease to expire, as kill -9 would.
func (h *harness) startController(name string, cfg Config) (c *Controller, stop func(crash bool)) {
	h.t.Helper()
	return h.startControllerOf(h.store, h.slurm, name, cfg, nil)
}

func (h *harness) startControllerOf(st *store.Store, slurm Slurm, name string, cfg Config, tweak func(*Controller)) (c *Controller, stop func(crash bool)) {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(h.t, err)
	cfg.Cluster = st.Cluster()
	cfg.Holder = name
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	cfg.WaitPoll = 20 * time.Millisecond
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL, cfg.LeaseRenew = 2*time.Second, 300*time.Millisecond
	}
	if cfg.Lookahead == (reconcile.Lookahead{}) {
		cfg.Lookahead = reconcile.DefaultLookahead
	}
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(h.t, err)
	c = &Controller{Config: cfg, Store: st, Slurm: slurm, Juice: h.juice, Key: session.StaticKey(h.key),
		Secret: h.secret, Log: h.log.WithName(name), Listener: ln, MetricsListener: mln, Metrics: NewMetrics(st)}
	if tweak != nil {
		tweak(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	var once sync.Once
	stop = func(crash bool) {
		once.Do(func() {
			c.crashed.Store(crash)
			cancel()
			<-done
		})
	}
	h.t.Cleanup(func() { stop(false) })
	return c, stop
}

// eventually polls cond until it holds or the time is up.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *harness) stateOf(run reconcile.RunID) reconcile.State {
	r, err := h.store.ForRun(context.Background(), run)
	if err != nil {
		return ""
	}
	return r.Status.State
}

func (h *harness) ensure(run reconcile.RunID, req request.Request) reconcile.Reservation {
	h.t.Helper()
	r, _, err := h.store.EnsureRun(context.Background(), reconcile.NewReservation{Run: run, Request: req})
	require.NoError(h.t, err)
	return r
}
