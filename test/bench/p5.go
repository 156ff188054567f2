package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/reconcile"
)

// P5Result is the controller's memory with N tracked runs, measured in a child process that holds only the
// controller and the scripted Slurm (the simulator and PostgreSQL are elsewhere), so its RSS is the controller's.
type P5Result struct {
	N int `json:"n"`
	// BaselineHeap is the child's heap in use before the controller starts, with the scripted Slurm's N jobs
	// made: what is not the controller's.
	BaselineHeap uint64        `json:"baseline_heap"`
	HeapInuse    uint64        `json:"heap_inuse"` // after runtime.GC, all ready, a few polls done
	HeapAlloc    uint64        `json:"heap_alloc"` // live objects
	Sys          uint64        `json:"sys"`        // bytes obtained from the OS by the Go runtime
	RSS          uint64        `json:"rss"`        // VmRSS
	PeakRSS      uint64        `json:"peak_rss"`   // VmHWM: the high-water mark, while the N sessions were made
	Goroutines   int           `json:"goroutines"`
	ToReady      time.Duration `json:"to_ready"` // controller start → all N ready (the poller's N Ensures included)
	// SteadyCPU is CPU per second of wall time while nothing changes (polls every PollInterval, each reading
	// every open reservation), and SteadyPolls the polls in that window.
	SteadyCPU    float64       `json:"steady_cpu"`
	SteadyPolls  float64       `json:"steady_polls"`
	SteadyWall   time.Duration `json:"steady_wall"`
	SteadyPasses float64       `json:"steady_passes"` // reconcile passes in the window
	SteadyGets   float64       `json:"steady_gets"`   // GetSession calls to the Juice Controller in the window
	SteadyWalks  float64       `json:"steady_walks"`  // agent listings and agent reads (liveness per pool walk)
	// OpenQuery is what one Store.Open() (run by every poll and every resync) costs with N open rows, measured in
	// the parent: time (median of 5) and bytes allocated.
	OpenQuery      time.Duration `json:"open_query"`
	OpenQueryAlloc uint64        `json:"open_query_alloc"`
	// Poll is one controller.Poller.Poll with the listing unchanged (slurmrestd answers "nothing changed"), with
	// N open reservations: wall time (median of 5), CPU of this process, bytes allocated, in the parent.
	Poll      time.Duration `json:"poll"`
	PollCPU   time.Duration `json:"poll_cpu"`
	PollAlloc uint64        `json:"poll_alloc"`
}

// SteadyWindow is P5's idle window: two periods of the 30 s resync and ready check, so that whole walks of the pool
// fall in it whatever the phase of its tickers.
var SteadyWindow = 60 * time.Second

// P5 runs the child (exe with -p5-child) against a fresh database and a simulator in this process.
func P5(ctx context.Context, n int, exe string, logf func(string, ...any)) (P5Result, error) {
	var res P5Result
	w, err := NewWorld(ctx, WorldConfig{GPUs: n + 8})
	if err != nil {
		return res, err
	}
	defer w.Close()
	cmd := exec.CommandContext(ctx, exe, "-p5-child", "-p5-n", strconv.Itoa(n), "-p5-db", w.DB.Runtime,
		"-p5-sim", w.Sim.URL)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("P5 child: %w", err)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("P5 child said %q: %w", out, err)
	}
	logf("P5: child done (%d ready in %s); timing Store.Open() over %d rows", n, res.ToReady.Round(time.Millisecond), n)
	var ds []time.Duration
	var ms0, ms1 runtime.MemStats
	for i := 0; i < 5; i++ {
		runtime.ReadMemStats(&ms0)
		start := time.Now()
		open, err := w.Store.Tracked(ctx)
		ds = append(ds, time.Since(start))
		runtime.ReadMemStats(&ms1)
		if err != nil {
			return res, err
		}
		if len(open) != n {
			return res, fmt.Errorf("P5: %d open reservations, want %d", len(open), n)
		}
		res.OpenQueryAlloc = ms1.TotalAlloc - ms0.TotalAlloc
	}
	res.OpenQuery = Summarise(ds).P50

	// The poller itself, as the leader runs it every PollInterval, against the same rows: the first poll takes
	// the listing, the next ones get "unchanged" from slurmrestd, as in a quiet cluster.
	w.Slurm.SetRunning(1, n, Request)
	p := &controller.Poller{Slurm: w.Slurm, Store: w.Store, Cluster: Cluster, Lookahead: reconcile.DefaultLookahead,
		Log: logr.Discard(), Enqueue: func(uuid.UUID) {}}
	if err := p.Poll(ctx); err != nil {
		return res, err
	}
	ds = ds[:0]
	var cpu, alloc time.Duration
	for i := 0; i < 5; i++ {
		runtime.ReadMemStats(&ms0)
		c0, start := procCPU(), time.Now()
		if err := p.Poll(ctx); err != nil {
			return res, err
		}
		ds = append(ds, time.Since(start))
		cpu += procCPU() - c0
		runtime.ReadMemStats(&ms1)
		alloc += time.Duration(ms1.TotalAlloc - ms0.TotalAlloc)
	}
	res.Poll, res.PollCPU, res.PollAlloc = Summarise(ds).P50, cpu/5, uint64(alloc/5)
	return res, nil
}

// P5Child is the child's side: parse its flags, run the controller until n runs are ready and a few polls have
// passed, then print a P5Result as JSON on stdout.
func P5Child(args []string) error {
	fs := flag.NewFlagSet("p5-child", flag.ContinueOnError)
	fs.Bool("p5-child", true, "")
	n := fs.Int("p5-n", 10000, "")
	db := fs.String("p5-db", "", "")
	sim := fs.String("p5-sim", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	w, err := NewWorld(ctx, WorldConfig{DBURL: *db, SimURL: *sim})
	if err != nil {
		return err
	}
	defer w.Close()
	w.Slurm.SetRunning(1, *n, Request)
	var res P5Result
	res.N = *n
	res.BaselineHeap = heapInuse()
	start := time.Now()
	// Production defaults (2 s polls, 4 workers, 30 s resync and ready checks).
	rc, err := w.StartController(controller.Config{})
	if err != nil {
		return err
	}
	defer rc.Stop()
	for {
		cs, err := w.Store.Summary(ctx)
		if err != nil {
			return err
		}
		ready := 0
		for _, c := range cs {
			if c.State == reconcile.StateReady {
				ready += c.N
			}
		}
		if ready >= *n {
			break
		}
		if time.Since(start) > 150*time.Second+time.Duration(*n)*10*time.Millisecond {
			return fmt.Errorf("only %d of %d ready after %s", ready, *n, time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.ToReady = time.Since(start)
	// A steady window: nothing changes in Slurm. It spans one resync and the ready checks (both every 30 s, each a
	// pass over every open reservation) and ~16 polls (each reading every open reservation): the standing cost of
	// tracking N runs. It starts once the last passes caused by the burst have drained.
	time.Sleep(2 * time.Second)
	m := rc.Metrics
	polls0, passes0, gets0 := Counter(m, "juice_slurm_polls_total"), Counter(m, "juice_slurm_reconcile_duration_seconds"),
		Counter(m, "juice_slurm_juice_request_duration_seconds", "op", "get_session")
	walks0 := Counter(m, "juice_slurm_juice_request_duration_seconds", "op", "list_agents") +
		Counter(m, "juice_slurm_juice_request_duration_seconds", "op", "get_agent")
	if path := os.Getenv("JUICE_BENCH_CPUPROFILE"); path != "" {
		// Where the standing cost goes, for `go tool pprof`.
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	cpu0, t0 := procCPU(), time.Now()
	time.Sleep(SteadyWindow)
	if os.Getenv("JUICE_BENCH_CPUPROFILE") != "" {
		pprof.StopCPUProfile()
	}
	res.SteadyWall = time.Since(t0)
	res.SteadyCPU = (procCPU() - cpu0).Seconds() / res.SteadyWall.Seconds()
	res.SteadyPolls = Counter(m, "juice_slurm_polls_total") - polls0
	res.SteadyPasses = Counter(m, "juice_slurm_reconcile_duration_seconds") - passes0
	res.SteadyGets = Counter(m, "juice_slurm_juice_request_duration_seconds", "op", "get_session") - gets0
	res.SteadyWalks = Counter(m, "juice_slurm_juice_request_duration_seconds", "op", "list_agents") +
		Counter(m, "juice_slurm_juice_request_duration_seconds", "op", "get_agent") - walks0
	runtime.GC()
	runtime.GC()
	if path := os.Getenv("JUICE_BENCH_HEAPPROFILE"); path != "" {
		// What the live heap holds, for `go tool pprof -sample_index=inuse_space`.
		if err := writeHeapProfile(path); err != nil {
			return err
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapInuse, res.HeapAlloc, res.Sys = ms.HeapInuse, ms.HeapAlloc, ms.Sys
	res.RSS, res.PeakRSS = procStatus("VmRSS"), procStatus("VmHWM")
	res.Goroutines = runtime.NumGoroutine()
	return json.NewEncoder(os.Stdout).Encode(res)
}

func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// procStatus reads a "kB" line of /proc/self/status, in bytes.
func procStatus(field string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == field {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// GrowthResult is the reconcile passes per run in each period of an accelerated idle controller.
type GrowthResult struct {
	Runs    int
	Period  time.Duration
	PerRun  []float64 // passes per run in each consecutive period
	Expects float64   // what the first version gave: one ready check and one resync per run per period
}

// PassGrowth runs a controller whose ready check and resync periods are both period (30 s each in production,
// accelerated here so the trend shows in seconds) over runs ready reservations with nothing changing, and counts
// the reconcile passes per run in each period: none once they are ready (the first version gave 2 per run per
// period).
func PassGrowth(ctx context.Context, runs, periods int, period time.Duration) (GrowthResult, error) {
	res := GrowthResult{Runs: runs, Period: period, Expects: 2}
	w, err := NewWorld(ctx, WorldConfig{GPUs: runs + 8})
	if err != nil {
		return res, err
	}
	defer w.Close()
	w.Slurm.SetRunning(1, runs, Request)
	rc, err := w.StartController(controller.Config{ReadyCheck: period, Resync: period, PollInterval: time.Minute})
	if err != nil {
		return res, err
	}
	defer rc.Stop()
	prev := 0.0
	for i := 0; i < periods; i++ {
		time.Sleep(period)
		p := Counter(rc.Metrics, "juice_slurm_reconcile_duration_seconds")
		res.PerRun = append(res.PerRun, (p-prev)/float64(runs))
		prev = p
	}
	return res, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
