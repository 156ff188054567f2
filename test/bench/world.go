// Package bench holds juice-slurm's benchmarks that need no Slurm (issue 7: P1, P3, P5, P6) and its Go
// micro-benchmarks. Each benchmark builds the real pieces the way production wires them — a controller.Controller
// on a fresh PostgreSQL database of the test bed, a pgxpool with its default size, the Juice HTTP client against an
// in-process juicesim at zero delays — and replaces only Slurm, by a scripted listing (test/fakeslurm), since P2 and P4
// are measured on the real cluster elsewhere.
//
// The driver is cmd/juice-bench; nothing here asserts on time: figures are reported, targets are compared in the
// report.
package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/jackc/pgx/v5"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/test/testbed"
	"github.com/juice-slurm/juice-slurm/test/world"
)

// Cluster is the cluster name every benchmark's runs carry.
const Cluster = "bench"

// Request is the canonical request of every benchmark job (what SPANK_JUICE_REQUEST carries).
const Request = "juice:v1:pool=test,gpus=1"

// World is one benchmark's environment (test/world): its own database, used as the runtime role as the
// controller uses it, its store and (optionally) simulator.
type World struct {
	*world.World
}

// WorldConfig says what a world needs.
type WorldConfig struct {
	// GPUs is the simulator's capacity in pool "test" (agents of 8 GPUs); 0 starts no simulator.
	GPUs int
	// DBURL reuses an existing database (P5's child); empty creates a fresh one on the test bed.
	DBURL string
	// SimURL points the Juice client at a simulator in another process (P5's child).
	SimURL string
	// PoolMaxConns, when set, overrides pgxpool's default size (max(4, NumCPU)), to show what the pool bounds.
	PoolMaxConns int
}

// NewWorld builds a world; Close drops its database and stops its simulator. The pool is the one the production
// controller builds (cmd/juice-slurm), whose default size (max(4, NumCPU) = 4 connections here) is part of what
// is measured, and the Juice client is the production one with its defaults.
func NewWorld(ctx context.Context, cfg WorldConfig) (*World, error) {
	wc := world.Config{Cluster: Cluster, DBURL: cfg.DBURL, SimURL: cfg.SimURL, PoolMaxConns: cfg.PoolMaxConns}
	if cfg.GPUs > 0 {
		agents := (cfg.GPUs + 7) / 8
		// Zero timing: the simulator assigns and activates a session within the POST that creates it, so what is
		// measured is juice-slurm, not the simulated controller's tick.
		wc.Sim = &juicesim.Config{Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", agents, 8, 80*vram.GiB)}}
	}
	w, err := world.Build(ctx, wc)
	if err != nil {
		return nil, err
	}
	return &World{World: w}, nil
}

// Running is a controller started by StartController.
type Running struct {
	C       *controller.Controller
	Metrics *controller.Metrics
	URL     string      // the hook API (https)
	CA      string      // the certificate the hooks pin
	TLS     *tls.Config // a client's TLS configuration that pins it
	stop    func()
}

// Stop ends the controller and waits for it.
func (r *Running) Stop() { r.stop() }

// StartController runs one replica in this process. cfg's zero fields take the production defaults, except
// the cluster, the holder and the hook listener (a free port: 7171 belongs to the lead's end-to-end tests).
func (w *World) StartController(cfg controller.Config) (*Running, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg.Cluster = Cluster
	if cfg.Holder == "" {
		cfg.Holder = "bench"
	}
	if cfg.Lookahead == (reconcile.Lookahead{}) {
		cfg.Lookahead = reconcile.DefaultLookahead
	}
	// No /metrics listener: the benchmarks read the registry, and the default address (127.0.0.1:8171) belongs to
	// the end-to-end tests' controller and to any other benchmark running at the time, whose Run then failed at
	// start and left the caller waiting for reservations that never came.
	if cfg.MetricsListen == "" {
		cfg.MetricsListen = "none"
	}
	// A metrics registry without the store: its by-state collector runs a query per scrape, and the benchmarks
	// scrape only counters.
	m := controller.NewMetrics(nil)
	// TLS with a certificate of the world's own, which the hooks pin, as in an installation.
	certFile, keyFile, err := testbed.HookCert(w.Dir)
	if err != nil {
		return nil, err
	}
	if cfg.HookTLS, err = hookapi.ServerTLS(certFile, keyFile); err != nil {
		return nil, err
	}
	clientTLS, err := hookapi.ClientTLS(certFile)
	if err != nil {
		return nil, err
	}
	c := &controller.Controller{Config: cfg, Store: w.Store, Slurm: w.Slurm, Juice: w.Juice, Key: session.StaticKey(w.Key),
		Secret: w.Secret, Log: benchLog(), Metrics: m, Listener: ln}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "bench: the controller stopped: %v\n", err)
		}
	}()
	var once sync.Once
	return &Running{C: c, Metrics: m, URL: "https://" + ln.Addr().String(), CA: certFile, TLS: clientTLS,
		stop: func() { once.Do(func() { cancel(); <-done }) }}, nil
}

// Counter sums the samples of a counter or the sample counts of a histogram in a registry, over the series
// whose labels include every pair in match; -1 when the registry cannot be read.
func Counter(m *controller.Metrics, name string, match ...string) float64 {
	n, err := world.Sum(m.Registry, name, match...)
	if err != nil {
		return -1
	}
	return n
}

// EnsureRuns registers n pending, wanted reservations for jobs first..first+n-1 (run 0), the way the poller or a
// prolog would, with par writers at once.
func (w *World) EnsureRuns(ctx context.Context, first uint32, n, par int) error {
	return w.EnsureRunsOf(ctx, first, n, par, "RUNNING")
}

// EnsureRunsOf is EnsureRuns with the jobs in jobState as the poller saw them (PENDING: reserved ahead).
func (w *World) EnsureRunsOf(ctx context.Context, first uint32, n, par int, jobState string) error {
	req, err := request.Parse(Request)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, par)
	for p := 0; p < par; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < n; i += par {
				run := reconcile.RunID{Cluster: Cluster, JobID: first + uint32(i)}
				if _, _, err := w.Store.EnsureRun(ctx, reconcile.NewReservation{Run: run, Request: req, UserName: "alice",
					Partition: "debug", JobState: jobState, Reason: "benchmark"}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// ReadyWatcher counts reservations reaching a state from the NOTIFY channel, on a connection of its own: it
// sees each commit as the controller's hub does, without polling the table.
type ReadyWatcher struct {
	mu    sync.Mutex
	seen  map[string]bool
	times []time.Time
	conn  *pgx.Conn
	done  chan struct{}
	state string
}

// WatchState starts counting reservations that reach state.
func WatchState(ctx context.Context, dbURL, state string) (*ReadyWatcher, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+store.NotifyChannel); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	rw := &ReadyWatcher{seen: map[string]bool{}, conn: conn, done: make(chan struct{}), state: state}
	go func() {
		defer close(rw.done)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			c, ok := store.ParseNotification(n.Payload)
			if !ok || c.Kind != store.KindStatus || string(c.State) != state {
				continue
			}
			id := c.ID.String()
			rw.mu.Lock()
			if !rw.seen[id] {
				rw.seen[id] = true
				rw.times = append(rw.times, time.Now())
			}
			rw.mu.Unlock()
		}
	}()
	return rw, nil
}

// WaitFor returns the time the n-th distinct reservation reached the state, or an error at the deadline.
func (rw *ReadyWatcher) WaitFor(n int, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		rw.mu.Lock()
		got := len(rw.times)
		var at time.Time
		if got >= n {
			at = rw.times[n-1]
		}
		rw.mu.Unlock()
		if got >= n {
			return at, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("only %d of %d reservations reached %s within %s", got, n, rw.state, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Between is the time from the moment a fraction from of the n reservations had reached the state to the moment
// a fraction to of them had (the steady part of a run, without its start and its tail), and how many reached it in
// between.
func (rw *ReadyWatcher) Between(n int, from, to float64) (time.Duration, int) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	i, j := int(from*float64(n)), int(to*float64(n))-1
	if i < 0 || j >= len(rw.times) || j <= i {
		return 0, 0
	}
	return rw.times[j].Sub(rw.times[i]), j - i
}

// Close stops watching (the context given to WatchState must end too).
func (rw *ReadyWatcher) Close() { rw.conn.Close(context.Background()) }

// Stats summarises durations.
type Stats struct {
	N                       int
	Min, P50, P90, P99, Max time.Duration
	Mean                    time.Duration
}

// Summarise sorts ds (in place) and takes its quantiles (nearest rank).
func Summarise(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	q := func(p float64) time.Duration {
		i := int(p*float64(len(ds))+0.999999) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(ds) {
			i = len(ds) - 1
		}
		return ds[i]
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Stats{N: len(ds), Min: ds[0], P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: ds[len(ds)-1],
		Mean: sum / time.Duration(len(ds))}
}

// Ms formats a duration in milliseconds with two decimals.
func Ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// benchLog is the controllers' log: none, or with JUICE_BENCH_LOG=1 its errors and transitions on stderr (to find
// why a benchmark stalls).
func benchLog() logr.Logger {
	if os.Getenv("JUICE_BENCH_LOG") == "" {
		return logr.Discard()
	}
	return funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: 1})
}
