package main

// slurmrestd's memory. A listing of the whole queue makes slurmrestd (26.05.5) allocate about 150 KB per job, and its
// RSS grows after each listing (1.5 GB after one listing of 10,000 jobs, 6.4 GB after about ten). At 100,000 jobs
// that can be most of the shared machine, so the bench starts each phase with a new slurmrestd (-restart-restd),
// watches MemAvailable while it runs, and stops the phase when it falls under -min-available: it takes the
// daemons' counters, kills slurmrestd (nothing else gives its memory back), and records how far the phase got.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sample is what the bench reads of the two daemons at one moment.
type sample struct {
	at          time.Time
	ctld, restd int64 // CPU clock ticks (utime+stime)
	restdRSS    int64 // bytes: VmRSS
	restdHWM    int64 // bytes: VmHWM, the peak RSS since slurmrestd started
}

func (b *bench) sample() (sample, error) {
	s := sample{at: time.Now()}
	var err error
	if s.ctld, err = cpuOf(b.ctld); err != nil {
		return s, err
	}
	if s.restd, err = cpuOf(b.restd); err != nil {
		return s, err
	}
	s.restdRSS, s.restdHWM, err = memOf(b.restd)
	return s, err
}

// cpuSecs is the CPU seconds of slurmctld and slurmrestd between two samples.
func (b *bench) cpuSecs(from, to sample) (ctld, restd float64) {
	return float64(to.ctld-from.ctld) / b.clkTck, float64(to.restd-from.restd) / b.clkTck
}

// guard watches MemAvailable while a phase or a probe runs (see the top of this file).
type guard struct {
	b       *bench
	cancel  context.CancelFunc
	stopped chan struct{}
	done    chan struct{}

	mu       sync.Mutex
	tripped  string // why the phase was stopped; "" while it was not
	last     sample // the daemons just before slurmrestd was killed
	peak     int64  // slurmrestd's VmHWM, the last seen
	minAvail int64  // the lowest MemAvailable seen
}

// watch starts a guard; cancel is the phase's: called when the guard trips.
func (b *bench) watch(cancel context.CancelFunc) *guard {
	g := &guard{b: b, cancel: cancel, stopped: make(chan struct{}), done: make(chan struct{}), minAvail: memAvailable()}
	go g.run()
	return g
}

func (g *guard) run() {
	defer close(g.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-g.stopped:
			return
		case <-t.C:
		}
		avail := memAvailable()
		_, hwm, _ := memOf(g.b.restd)
		g.mu.Lock()
		g.minAvail = min(g.minAvail, avail)
		g.peak = max(g.peak, hwm)
		g.mu.Unlock()
		if avail >= g.b.cfg.minAvail {
			continue
		}
		last, err := g.b.sample()
		why := fmt.Sprintf("MemAvailable %d MiB < %d MiB with slurmrestd at %d MiB RSS", avail>>20, g.b.cfg.minAvail>>20, last.restdRSS>>20)
		if kerr := g.b.killRestd(); kerr != nil {
			why += fmt.Sprintf("; killing slurmrestd failed: %v", kerr)
		}
		if err != nil {
			why += fmt.Sprintf("; its counters: %v", err)
		}
		logf("memory guard: %s: slurmrestd killed, the phase stops", why)
		g.mu.Lock()
		g.tripped, g.last = why, last
		g.peak = max(g.peak, last.restdHWM)
		g.mu.Unlock()
		g.cancel()
		return
	}
}

// stop ends the watch; it returns why the guard tripped ("" when it did not) and the daemons' sample just before.
func (g *guard) stop() (tripped string, last sample, peak, minAvail int64) {
	select {
	case <-g.stopped:
	default:
		close(g.stopped)
	}
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tripped, g.last, g.peak, g.minAvail
}

// Tripped is the guard's reason, "" while it has not tripped.
func (g *guard) Tripped() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tripped
}

// killRestd kills slurmrestd by its pid file, after checking that the pid is slurmrestd's.
func (b *bench) killRestd() error {
	raw, err := os.ReadFile(b.restd)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return fmt.Errorf("%s: %q is no pid", b.restd, raw)
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return fmt.Errorf("%s names pid %d: %w", b.restd, pid, err)
	}
	if c := strings.TrimSpace(string(comm)); c != "slurmrestd" {
		return fmt.Errorf("%s names pid %d, which is %q, not slurmrestd", b.restd, pid, c)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// restartRestd runs -restart-restd, with MALLOC_ARENA_MAX=arenas for slurmrestd when arenas is not nil (an empty
// string: glibc's default). It also hands the bench's own memory back (the last listing's jobs), so that
// MemAvailable measures the daemons.
func (b *bench) restartRestd(ctx context.Context, arenas *string) error {
	debug.FreeOSMemory()
	if b.cfg.restartRestd == "" {
		return nil
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", b.cfg.restartRestd)
	cmd.Env = os.Environ()
	// A process the command leaves running that kept its output would hold the pipe open for ever.
	cmd.WaitDelay = 10 * time.Second
	if arenas != nil {
		cmd.Env = append(cmd.Env, "JUICE_CHROOT_RESTD_MALLOC_ARENA_MAX="+*arenas)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("-restart-restd %q: %w: %s", b.cfg.restartRestd, err, out)
	}
	if err := b.c.Ping(ctx); err != nil {
		return fmt.Errorf("slurmrestd after -restart-restd: %w", err)
	}
	return nil
}

// memOf is VmRSS and VmHWM of the process in a pid file, in bytes.
func memOf(pidFile string) (rss, hwm int64, err error) {
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, 0, err
	}
	pid := strings.TrimSpace(string(raw))
	st, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0, fmt.Errorf("%s names pid %s: %w", pidFile, pid, err)
	}
	return kB(st, "VmRSS"), kB(st, "VmHWM"), nil
}

// kB is the "Name: N kB" line of a /proc file, in bytes (0 when there is none).
func kB(b []byte, name string) int64 {
	m := regexp.MustCompile(`(?m)^` + name + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n << 10
}

// memAvailable is MemAvailable of /proc/meminfo, in bytes (0 when unknown: the guard then stops at once).
func memAvailable() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	return kB(b, "MemAvailable")
}

// listAll lists the whole queue and returns how many jobs it held; the bench's copy of them is handed back to the
// system before it returns (the guard watches the machine's memory, and this process is on it too).
func (b *bench) listAll(ctx context.Context) (int, error) {
	defer debug.FreeOSMemory()
	l, err := b.c.ListJobs(ctx, time.Time{})
	return len(l.Jobs), err
}

// ---- the probe: what listings cost slurmrestd ----------------------------------------------------------------

// listing is one listing of the whole queue in the probe.
type listing struct {
	wall        time.Duration
	ctld, restd float64 // CPU seconds
	rss, hwm    int64   // slurmrestd's VmRSS after it, its VmHWM (peak) so far
	jobs        int
}

type probeRun struct {
	arenas   string // MALLOC_ARENA_MAX, "" glibc's default; "-" not restarted
	startRSS int64
	lists    []listing
	stopped  string
	minAvail int64
}

// probe lists the whole queue b.cfg.probe times one after another from a new slurmrestd, for each allocator setting.
func (b *bench) probe(ctx context.Context) ([]probeRun, error) {
	if b.cfg.probe <= 0 {
		return nil, nil
	}
	settings := b.cfg.probeArenas
	if b.cfg.restartRestd == "" {
		settings = []string{"-"}
	}
	var runs []probeRun
	for _, arenas := range settings {
		a := arenas
		if err := b.restartRestd(ctx, &a); err != nil {
			return nil, err
		}
		pr := probeRun{arenas: arenas}
		s0, err := b.sample()
		if err != nil {
			return nil, err
		}
		pr.startRSS = s0.restdRSS
		pctx, cancel := context.WithCancel(ctx)
		g := b.watch(cancel)
		for i := 0; i < b.cfg.probe; i++ {
			from, err := b.sample()
			if err != nil {
				break
			}
			jobs, err := b.listAll(pctx)
			if err != nil {
				if g.Tripped() == "" {
					g.stop()
					cancel()
					return nil, fmt.Errorf("probe listing %d (MALLOC_ARENA_MAX %q): %w", i+1, arenas, err)
				}
				break
			}
			to, err := b.sample()
			if err != nil {
				break
			}
			ls := listing{wall: to.at.Sub(from.at), rss: to.restdRSS, hwm: to.restdHWM, jobs: jobs}
			ls.ctld, ls.restd = b.cpuSecs(from, to)
			pr.lists = append(pr.lists, ls)
			logf("probe (MALLOC_ARENA_MAX %q): listing %d of %d jobs: %.1f s, slurmctld %.1f CPU s, slurmrestd %.1f CPU s, RSS %d MiB (peak %d MiB), MemAvailable %d MiB",
				arenas, i+1, ls.jobs, ls.wall.Seconds(), ls.ctld, ls.restd, ls.rss>>20, ls.hwm>>20, memAvailable()>>20)
		}
		pr.stopped, _, _, pr.minAvail = g.stop()
		cancel()
		runs = append(runs, pr)
	}
	// The phases start slurmrestd anew with the chroot's own setting.
	return runs, nil
}
