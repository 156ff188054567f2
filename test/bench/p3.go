package bench

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/reconcile"
)

// P3Config is one configuration of the throughput benchmark.
type P3Config struct {
	N       int
	Workers int
	// Source is how the runs become wanted: "poller" (the scripted Slurm lists N RUNNING jobs; the poller
	// registers them, one Ensure each) or "store" (N reservations registered beforehand; the leader's first
	// resync queues them all).
	Source       string
	PoolMaxConns int    // 0: pgxpool's default, as in production
	CPUProfile   string // write a CPU profile of the timed part here
}

// P3Result is one configuration's throughput and what it cost.
type P3Result struct {
	P3Config
	Elapsed   time.Duration // controller start → the N-th reservation ready (its NOTIFY)
	PerSecond float64
	// Steady is the rate over the steady part: from 10 % to 90 % of the runs ready (issue 24: the start-up, the
	// first poll and the tail out of the figure).
	Steady     float64
	Passes     float64 // reconcile passes (all, including the ones NOTIFY's self-wake-ups cause)
	JuiceCalls map[string]float64
	Errors     float64
	ProcCPU    time.Duration // CPU of this process (controller, simulator, watcher) during the run
	SystemBusy float64       // fraction of all cores busy during the run (PostgreSQL included)
	PGConns    int32
}

// P3 measures reservations per second: N runs wanted at once, the time until all are ready through the real
// controller (poller or resync, work queue, workers, PostgreSQL, HTTP to the simulator at zero delay).
func P3(ctx context.Context, cfg P3Config) (P3Result, error) {
	res := P3Result{P3Config: cfg, JuiceCalls: map[string]float64{}}
	w, err := NewWorld(ctx, WorldConfig{GPUs: cfg.N + 8, PoolMaxConns: cfg.PoolMaxConns})
	if err != nil {
		return res, err
	}
	defer w.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, err := WatchState(wctx, w.DB.Runtime, string(reconcile.StateReady))
	if err != nil {
		return res, err
	}
	defer watch.Close()
	// Both ways the jobs are listed RUNNING: a reservation whose job is not listed is released as gone.
	w.Slurm.SetRunning(1, cfg.N, Request)
	switch cfg.Source {
	case "store":
		if err := w.EnsureRuns(ctx, 1, cfg.N, 4); err != nil {
			return res, err
		}
	case "poller":
	default:
		return res, fmt.Errorf("P3: unknown source %q", cfg.Source)
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0, sys0 := procCPU(), readSystemCPU()
	start := time.Now()
	// A long poll interval: the first poll (at lead start) is the one that sees the jobs, and the following ones
	// would only add the cost of Open() to the figure.
	rc, err := w.StartController(controller.Config{Workers: cfg.Workers, PollInterval: time.Minute})
	if err != nil {
		return res, err
	}
	defer rc.Stop()
	last, err := watch.WaitFor(cfg.N, 120*time.Second)
	if err != nil {
		return res, err
	}
	res.Elapsed = last.Sub(start)
	res.ProcCPU = procCPU() - cpu0
	res.SystemBusy = readSystemCPU().busySince(sys0)
	res.PerSecond = float64(cfg.N) / res.Elapsed.Seconds()
	if d, k := watch.Between(cfg.N, 0.1, 0.9); d > 0 {
		res.Steady = float64(k) / d.Seconds()
	}
	// Let the wake-ups the last commits caused drain before counting passes.
	time.Sleep(300 * time.Millisecond)
	res.Passes = Counter(rc.Metrics, "juice_slurm_reconcile_duration_seconds")
	res.Errors = Counter(rc.Metrics, "juice_slurm_reconcile_errors_total")
	for _, op := range []string{"request_session", "get_session", "cancel_session"} {
		res.JuiceCalls[op] = Counter(rc.Metrics, "juice_slurm_juice_request_duration_seconds", "op", op)
	}
	res.PGConns = w.Pool.Stat().MaxConns()
	return res, nil
}

func procCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type systemCPU struct{ busy, total uint64 }

// readSystemCPU reads the first line of /proc/stat: every core's time, to tell how busy the machine (PostgreSQL
// and the other engineers' work included) was during a run.
func readSystemCPU() systemCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return systemCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var s systemCPU
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	return s
}

func (s systemCPU) busySince(old systemCPU) float64 {
	if s.total <= old.total {
		return 0
	}
	return float64(s.busy-old.busy) / float64(s.total-old.total)
}
