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
	Elapsed    time.Duration // controller start → the N-th reservation ready (its NOTIFY)
	PerSecond  float64
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
	watch, err := WatchState(wctx, w.DBURL, string(reconcile.StateReady))
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

// SaveCostResult compares one transition's write through PGStore.Save with the same writes as one hand-written
// statement (one round trip, its own transaction), sequentially on an idle pool: the floor of a transition's cost
// in PostgreSQL and the network. (PGStore.Save was a five-round-trip transaction until this comparison showed it
// 3.2 times slower.)
type SaveCostResult struct {
	N                  int
	Save, OneStatement Stats
	SaveCPU, OneCPU    time.Duration // this process, per write
	SaveBusy, OneBusy  float64       // fraction of the machine busy
}

// sqlSaveOneStatement does what PGStore.Save's transaction does, in one statement: data-modifying CTEs run
// exactly once, and the notification is sent at commit like the transaction's.
const sqlSaveOneStatement = `WITH u AS (
	UPDATE juice_reservations SET state = $3, reason = $4, fail_reason = $5, wanted = $6, requested = $7,
		session_id = $8, agent_address = $9, sealed = $10, job_state = $11, ready_at = $12, updated_at = now(),
		version = version + 1
	WHERE id = $1 AND version = $2 RETURNING id, state, updated_at, version),
e AS (INSERT INTO juice_events (reservation_id, from_state, to_state, event, reason)
	SELECT id, $13, $14, $15, $4 FROM u),
n AS (SELECT pg_notify('` + reconcile.NotifyChannel + `', id::text || ' ' || state) FROM u)
SELECT updated_at, version, (SELECT count(*) FROM n) FROM u`

// SaveCost times n transitions (pending → requesting) written each way.
func SaveCost(ctx context.Context, n int) (SaveCostResult, error) {
	res := SaveCostResult{N: n}
	w, err := NewWorld(ctx, WorldConfig{})
	if err != nil {
		return res, err
	}
	defer w.Close()
	if err := w.EnsureRuns(ctx, 1, 2*n, 4); err != nil {
		return res, err
	}
	open, err := w.Store.Open(ctx)
	if err != nil {
		return res, err
	}
	now := time.Now()
	for half, out := range []*Stats{&res.Save, &res.OneStatement} {
		var ds []time.Duration
		cpu0, sys0 := procCPU(), readSystemCPU()
		for i := half * n; i < (half+1)*n; i++ {
			r := open[i]
			t, err := reconcile.Apply(&r, reconcile.EventRequest, "benchmark: asking", now)
			if err != nil {
				return res, err
			}
			start := time.Now()
			if half == 0 {
				err = w.Store.Save(ctx, &r, &t)
			} else {
				var count int64
				err = w.Pool.QueryRow(ctx, sqlSaveOneStatement, r.ID, r.Version, r.State, r.Reason, r.FailReason, r.Wanted,
					r.Requested, r.SessionID, r.AgentAddress, r.Sealed, r.JobState, nil, t.From, t.To, t.Event).
					Scan(&r.UpdatedAt, &r.Version, &count)
			}
			if err != nil {
				return res, err
			}
			ds = append(ds, time.Since(start))
		}
		cpu := (procCPU() - cpu0) / time.Duration(n)
		busy := readSystemCPU().busySince(sys0)
		*out = Summarise(ds)
		if half == 0 {
			res.SaveCPU, res.SaveBusy = cpu, busy
		} else {
			res.OneCPU, res.OneBusy = cpu, busy
		}
	}
	// Both ways wrote the same rows: each reservation one update and one event more.
	var events int
	if err := w.Pool.QueryRow(ctx, `SELECT count(*) FROM juice_events WHERE event = 'request'`).Scan(&events); err != nil {
		return res, err
	}
	if events != 2*n {
		return res, fmt.Errorf("save cost: %d request events, want %d", events, 2*n)
	}
	return res, nil
}
