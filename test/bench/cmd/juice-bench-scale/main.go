// Command juice-bench-scale measures what the controller's polling costs slurmctld with a large queue (issue 14
// item 1), on a real cluster (make bench-scale: the Slurm 26.05 chroot), side by side in one run:
//
//   - baseline: the queue and its churn (one job changed every second, a new Juice job every few seconds), no
//     controller;
//   - full listings: a controller.Poller as before issue 14 (as on an API without jobs/state: one conditional
//     listing per poll);
//   - tracking: the Poller as it is (known runs by their states between listings paced by ListPace);
//   - baseline again, to show the machine did not drift.
//
// For each phase: slurmctld's and slurmrestd's CPU seconds per minute (utime+stime of their processes over the
// phase's minute), slurmrestd's peak RSS, the poller's requests, and the look-ahead's freshness: the time from a
// Juice job's submission to its reservation's creation. The queue is grown to each size in turn: the held plain jobs and the Juice jobs (1% of
// the queue), each pending with a begin time a week ahead so nothing runs; the poller's look-ahead window (8 days)
// reserves every Juice job, so each new one measures freshness. The poller runs alone (no reconciler): reservations
// stay pending, which changes nothing Slurm sees. Nothing is asserted on time; the figures are written to -out.
//
// Before the phases, at each size, a probe lists the whole queue a few times from a new slurmrestd, with glibc's
// default allocator arenas and with MALLOC_ARENA_MAX=2: what one listing costs and what slurmrestd keeps after it.
// Each phase starts with a new slurmrestd and runs under a memory guard (memory.go): at 100,000 jobs a listing can
// take much of the shared machine's memory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
	"github.com/juice-slurm/juice-slurm/test/world"
)

const (
	juiceReq   = "juice:v1:pool=test,gpus=1"
	plainName  = "bench-scale"
	juiceName  = "bench-scale-juice"
	juiceShare = 100 // one job in juiceShare is a Juice job
)

type config struct {
	sizes        []int
	phase        time.Duration
	poll         time.Duration
	newEvery     time.Duration
	tail         time.Duration
	purgeWait    time.Duration
	out          string
	submitters   int
	restartRestd string   // a shell command that starts slurmrestd anew
	minAvail     int64    // bytes: a phase stops when MemAvailable falls under this
	probe        int      // listings one after another in the memory probe
	probeArenas  []string // MALLOC_ARENA_MAX settings of the probe ("" is glibc's default)
	fullArenas   []string // the full-listings phase runs once with each
}

func main() {
	var cfg config
	sizes := flag.String("sizes", "10000,20000", "queue sizes, in growing order (1% Juice jobs)")
	flag.DurationVar(&cfg.phase, "phase", time.Minute, "the measured time of each phase")
	flag.DurationVar(&cfg.poll, "poll", 2*time.Second, "the poller's interval (the controller's default)")
	flag.DurationVar(&cfg.newEvery, "new-every", 3*time.Second, "a new Juice job is submitted this often during a phase")
	flag.DurationVar(&cfg.tail, "tail", controller.DefaultListPace.Max+3*time.Minute, "after a phase, how long the poller may take to reserve its last new jobs")
	flag.DurationVar(&cfg.purgeWait, "purge-wait", 8*time.Minute, "at the end, wait this long at most for slurmctld to purge the cancelled jobs (MinJobAge); 0 does not wait")
	flag.StringVar(&cfg.out, "out", "", "write the Markdown results here")
	flag.IntVar(&cfg.submitters, "submitters", 8, "concurrent submissions")
	flag.StringVar(&cfg.restartRestd, "restart-restd", "", "a shell command that stops slurmrestd and starts it again (make bench-scale: "+
		"test/chroot/slurm-chroot.sh restart-rest sid), run before each phase and probe so that each starts with a new slurmrestd; "+
		"JUICE_CHROOT_RESTD_MALLOC_ARENA_MAX in its environment sets the probe's allocator setting. Empty: never restarted")
	minAvail := flag.Int64("min-available", 3072, "MiB: a phase or probe stops (slurmrestd killed and restarted) when MemAvailable falls under this")
	flag.IntVar(&cfg.probe, "probe-listings", 2, "the memory probe at each size: this many listings of the whole queue one after another from a new slurmrestd (0: no probe)")
	arenas := flag.String("probe-arenas", ",2", "the probe's MALLOC_ARENA_MAX settings of slurmrestd, comma-separated (empty: glibc's default); needs -restart-restd")
	fullArenas := flag.String("full-arenas", ",2", "the full-listings phase runs once for each of these MALLOC_ARENA_MAX settings of slurmrestd (empty: glibc's default); needs -restart-restd, else it runs once")
	flag.Parse()
	cfg.fullArenas = strings.Split(*fullArenas, ",")
	if cfg.restartRestd == "" {
		cfg.fullArenas = cfg.fullArenas[:1]
	}
	cfg.minAvail = *minAvail << 20
	cfg.probeArenas = strings.Split(*arenas, ",")
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < juiceShare {
			fail(fmt.Errorf("-sizes: %q is not a queue size of at least %d", s, juiceShare))
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	env, err := testbed.Load(testbed.EnvFile())
	if err != nil {
		fail(err)
	}
	// SIGINT or SIGTERM ends the run through its clean-up: the jobs it submitted are cancelled.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, env); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "juice-bench-scale:", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[bench-scale %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

type bench struct {
	cfg    config
	env    testbed.Env
	c      *slurmrest.Client
	plain  []uint32 // held plain jobs, in submission order
	juice  []uint32
	mu     sync.Mutex
	all    []uint32 // every job submitted, for the clean-up
	begin  time.Time
	ctld   string // pid files
	restd  string
	clkTck float64
}

func run(ctx context.Context, cfg config, env testbed.Env) error {
	c, err := slurmrest.New(slurmrest.Config{BaseURL: env.SlurmrestdURL(), UserName: env.SlurmUser(),
		TokenSource: slurmrest.FileToken(env.TokenFile()), RequestTimeout: 10 * time.Minute})
	if err != nil {
		return err
	}
	if err := c.Ping(ctx); err != nil {
		return fmt.Errorf("slurmrestd %s: %w", env.SlurmrestdURL(), err)
	}
	if can, err := c.CanTrackStates(ctx); err != nil || !can {
		return fmt.Errorf("slurmrestd %s (API %s) has no jobs/state: run this on Slurm 24.11 or 26.05 (err %v)", env.SlurmrestdURL(), c.Version(), err)
	}
	b := &bench{cfg: cfg, env: env, c: c, begin: time.Now().Add(7 * 24 * time.Hour),
		ctld: filepath.Join(env.RunDir(), "slurmctld.pid"), restd: filepath.Join(env.RunDir(), "slurmrestd.pid"), clkTck: clkTck()}
	if err := b.checkMaxJobCount(ctx, cfg.sizes[len(cfg.sizes)-1]); err != nil {
		return err
	}
	// Other users' finished jobs are normal (an e2e run leaves a hundred); an earlier run of the bench leaves thousands.
	others, err := b.waitForPurge(ctx, max(cfg.sizes[0]/10, 500))
	if err != nil {
		return err
	}
	defer b.cleanUp()
	var md strings.Builder
	fmt.Fprintf(&md, "# Polling cost with a large queue (issue 14 item 1)\n\n`make bench-scale` (test/bench/cmd/juice-bench-scale) "+
		"on %s, %s UTC: Slurm %s (API %s), 2 compute nodes, the whole machine 2 cores shared with the test bed's other users. "+
		"Nothing is asserted on time.\n\n", host(), time.Now().UTC().Format("2006-01-02 15:04"), c.SlurmRelease(), c.Version())
	fmt.Fprintf(&md, "The queue: held plain jobs and pending Juice jobs (1%% of it, `admin_comment` %s, a begin time a week ahead, "+
		"so nothing runs). Each phase lasts %s, during which one held job's comment changes every second (a site where something "+
		"changes every second) and a new Juice job is submitted every %s. A phase's controller is a real `controller.Poller` "+
		"polling every %s (the controller's default) over a database of its own, without a reconciler (reservations stay "+
		"pending); its look-ahead window (8 days) reserves every Juice job, so each new one measures freshness. *full listings* is "+
		"the design before issue 14 (the poller as on an API without jobs/state: one conditional `GET jobs?update_time` per poll); *tracking* is the poller "+
		"now: the open reservations' jobs by `GET jobs/state/?job_id=...` and new jobs by a discovery (`GET jobs/state/`, every "+
		"job's state, then one GET per new job id), between listings; listings and discoveries are each paced by `ListPace` "+
		"(default: no sooner than 10 × the last one's wall time, no later than %s after it). CPU is utime+stime of the daemon's process over "+
		"the phase, per minute; *caused* is the phase's CPU minus the mean of the two baselines'. The listing's work is mostly slurmrestd's (it turns slurmctld's reply into JSON), so both daemons are shown. Freshness: from a new "+
		"Juice job's submission to its reservation's creation (the first poll that saw it).\n\n",
		"`"+juiceReq+"`", cfg.phase, cfg.newEvery, cfg.poll, controller.DefaultListPace.Max)
	if cfg.restartRestd != "" {
		fmt.Fprintf(&md, "slurmrestd is started anew before each phase and each probe (`%s`): a listing of the whole queue leaves its memory "+
			"allocated, so a phase would otherwise start with an earlier one's. ", cfg.restartRestd)
	}
	fmt.Fprintf(&md, "A memory guard reads MemAvailable every 200 ms during each phase and probe: under %d MiB, it takes the daemons' "+
		"counters, kills slurmrestd and stops the phase, which then shows what it measured until then, marked *stopped*. "+
		"slurmrestd's peak RSS is its VmHWM (since its start). At the start slurmctld held %d jobs of others (the sizes below "+
		"count the bench's own; the probe's *jobs* are all that a listing returned).\n\n", cfg.minAvail>>20, others)
	for _, size := range cfg.sizes {
		if err := b.grow(ctx, size); err != nil {
			return err
		}
		res, err := b.measure(ctx, size)
		if err != nil {
			return err
		}
		res.write(&md)
		if cfg.out != "" { // each size as soon as it is measured: a later failure keeps it
			if err := os.WriteFile(cfg.out, []byte(md.String()), 0o644); err != nil {
				return err
			}
		}
	}
	fmt.Print(md.String())
	return nil
}

// waitForPurge waits (at most -purge-wait) until slurmctld holds at most allowed finished jobs: the cancelled jobs
// of an earlier run stay listed for MinJobAge and would swell the first size's listings. It returns how many jobs
// slurmctld holds then.
func (b *bench) waitForPurge(ctx context.Context, allowed int) (int, error) {
	deadline := time.Now().Add(b.cfg.purgeWait)
	for {
		states, err := b.c.AllJobStates(ctx)
		if err != nil {
			return 0, fmt.Errorf("every job's state: %w", err)
		}
		finished := 0
		for _, s := range states {
			if s.State.IsFinished() {
				finished++
			}
		}
		if finished <= allowed {
			return len(states), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("slurmctld still holds %d finished jobs after %s (MinJobAge): an earlier run's?", finished, b.cfg.purgeWait)
		}
		logf("slurmctld holds %d finished jobs (of %d): waiting for their purge (MinJobAge)", finished, len(states))
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Second):
		}
	}
}

// checkMaxJobCount fails when slurmctld cannot hold the queue (slurm.conf MaxJobCount; the 26.05 chroot's is 200,000).
func (b *bench) checkMaxJobCount(ctx context.Context, size int) error {
	out, err := exec.CommandContext(ctx, b.env.Scontrol(), "show", "config").CombinedOutput()
	if err != nil {
		return fmt.Errorf("scontrol show config: %w: %s", err, out)
	}
	m := regexp.MustCompile(`(?m)^MaxJobCount\s*=\s*(\d+)`).FindSubmatch(out)
	if m == nil {
		return errors.New("scontrol show config: no MaxJobCount")
	}
	max, _ := strconv.Atoi(string(m[1]))
	if need := size + size/10 + 1000; max < need {
		return fmt.Errorf("slurmctld's MaxJobCount is %d, the bench needs %d: test/chroot/slurm-chroot.sh up sid sets 200000", max, need)
	}
	return nil
}

// grow submits jobs until the queue holds size of them, 1% Juice jobs.
func (b *bench) grow(ctx context.Context, size int) error {
	have := len(b.plain) + len(b.juice)
	if have >= size {
		return nil
	}
	logf("growing the queue from %d to %d jobs", have, size)
	start := time.Now()
	var next atomic.Int64
	next.Store(int64(have))
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := 0; w < b.cfg.submitters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(size) || firstErr.Load() != nil {
					return
				}
				isJuice := i%juiceShare == 0
				id, err := b.submit(ctx, isJuice)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				b.mu.Lock()
				if isJuice {
					b.juice = append(b.juice, id)
				} else {
					b.plain = append(b.plain, id)
				}
				if n := len(b.plain) + len(b.juice); n%10000 == 0 {
					logf("%d jobs queued (%s)", n, time.Since(start).Round(time.Second))
				}
				b.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return fmt.Errorf("submit (%d queued): %w", len(b.plain)+len(b.juice), err)
	}
	logf("queue of %d jobs (%d Juice) in %s", len(b.plain)+len(b.juice), len(b.juice), time.Since(start).Round(time.Second))
	return nil
}

func (b *bench) submit(ctx context.Context, isJuice bool) (uint32, error) {
	s := slurmrest.JobSubmission{Script: "#!/bin/sh\ntrue\n", Name: plainName, Partition: b.env.Partition(), Hold: true}
	if isJuice {
		s = slurmrest.JobSubmission{Script: "#!/bin/sh\ntrue\n", Name: juiceName, Partition: b.env.Partition(),
			AdminComment: juiceReq, Comment: juiceReq, Begin: b.begin}
	}
	id, err := b.c.SubmitJob(ctx, s)
	if err == nil {
		b.mu.Lock()
		b.all = append(b.all, id)
		b.mu.Unlock()
	}
	return id, err
}

// ---- phases -----------------------------------------------------------------------------------------

type phase struct {
	name          string
	design        string  // "", "full", "tracking"
	arenas        *string // slurmrestd's MALLOC_ARENA_MAX in this phase; nil: the chroot's default
	ctld, restd   float64 // CPU seconds per minute over the measured time
	measured      time.Duration
	first         listing // the first poll (a listing): its wall time, the daemons' CPU, slurmrestd's RSS after it
	firstDone     bool
	peak          int64         // slurmrestd's VmHWM: its peak RSS in the phase (it starts anew before each phase)
	minAvail      int64         // the lowest MemAvailable seen
	stopped       string        // why the memory guard stopped the phase
	inflight      time.Duration // a listing in flight when the phase was stopped: for how long
	polls, errs   int64
	lists, states int64
	gets          int64
	discoveries   int64
	listWall      time.Duration // summed
	discoverWall  time.Duration // summed
	firstPoll     time.Duration
	reservedFirst int
	fresh         []time.Duration
	unseen        int
	newJobs       int
	skipped       string // why the phase was not run
}

type result struct {
	size, juice int
	poll        time.Duration
	probeN      int // listings asked of each probe run
	probe       []probeRun
	phases      []*phase
}

func (b *bench) measure(ctx context.Context, size int) (*result, error) {
	res := &result{size: len(b.plain) + len(b.juice), juice: len(b.juice), poll: b.cfg.poll, probeN: b.cfg.probe}
	probe, err := b.probe(ctx)
	if err != nil {
		return nil, fmt.Errorf("size %d, the memory probe: %w", size, err)
	}
	res.probe = probe
	phases := []*phase{{name: "baseline (no controller)"}}
	for _, a := range b.cfg.fullArenas {
		ph := &phase{name: "full listings (before)", design: "full"}
		if b.cfg.restartRestd != "" {
			ph.arenas = &a
			if a == "" {
				ph.name += ", slurmrestd with glibc's default arenas"
			} else {
				ph.name += ", slurmrestd with MALLOC_ARENA_MAX=" + a
			}
		}
		phases = append(phases, ph)
	}
	phases = append(phases, &phase{name: "tracking (now)", design: "tracking"}, &phase{name: "baseline again"})
	for _, ph := range phases {
		logf("size %d: phase %s", size, ph.name)
		if err := b.runPhase(ctx, ph); err != nil {
			return nil, fmt.Errorf("size %d, phase %s: %w", size, ph.name, err)
		}
		logf("size %d: %s: slurmctld %.2f s/min, slurmrestd %.2f s/min, %d polls, %d listings, %d job-state calls, %d GETs, slurmrestd peak RSS %d MiB%s",
			size, ph.name, ph.ctld, ph.restd, ph.polls, ph.lists, ph.states, ph.gets, ph.peak>>20, prefixed("; ", ph.skipped+ph.stopped))
		res.phases = append(res.phases, ph)
	}
	return res, nil
}

// counting counts the poller's requests and the wall time of its listings.
type counting struct {
	controller.Slurm
	lists, states, gets atomic.Int64
	all                 atomic.Int64 // discoveries (every job's state)
	allWall             atomic.Int64 // their wall time, summed
	listWall            atomic.Int64 // of the listings that ended
	listing             atomic.Int64 // UnixNano of the start of the listing in flight, 0 when none
}

func (c *counting) ListJobs(ctx context.Context, since time.Time) (slurmrest.JobList, error) {
	t := time.Now()
	c.listing.Store(t.UnixNano())
	defer c.listing.Store(0)
	l, err := c.Slurm.ListJobs(ctx, since)
	if err == nil {
		c.lists.Add(1)
		c.listWall.Add(int64(time.Since(t)))
	}
	return l, err
}

func (c *counting) GetJob(ctx context.Context, id uint32) (*slurmrest.Job, error) {
	c.gets.Add(1)
	return c.Slurm.GetJob(ctx, id)
}

func (c *counting) AllJobStates(ctx context.Context) ([]slurmrest.JobStatus, error) {
	t := time.Now()
	s, err := c.Slurm.AllJobStates(ctx)
	if err == nil {
		c.all.Add(1)
		c.allWall.Add(int64(time.Since(t)))
	}
	return s, err
}

// untracked is the poller's Slurm in the design before issue 14 (full listings): an API without jobs/state, as
// Slurm 22.05's, so the poller lists the queue at every poll and never tracks states.
type untracked struct{ *counting }

func (untracked) CanTrackStates(context.Context) (bool, error) { return false, nil }

func (c *counting) JobStates(ctx context.Context, ids []uint32) ([]slurmrest.JobStatus, error) {
	c.states.Add((int64(len(ids)) + slurmrest.StatesBatch - 1) / slurmrest.StatesBatch)
	return c.Slurm.JobStates(ctx, ids)
}

func (b *bench) runPhase(ctx context.Context, ph *phase) error {
	// Each phase starts with a new slurmrestd: what an earlier phase's listings left allocated stays out of it.
	if err := b.restartRestd(ctx, ph.arenas); err != nil {
		return err
	}
	// A phase with a controller lists the queue: it starts only with a GiB more than the guard's floor. A baseline
	// lists nothing and always runs (it is what the other phases are compared with).
	if avail := memAvailable(); ph.design != "" && avail < b.cfg.minAvail+1<<30 {
		ph.skipped = fmt.Sprintf("not run: %d MiB of memory available at its start (the guard stops a phase under %d MiB)", avail>>20, b.cfg.minAvail>>20)
		logf("%s", ph.skipped)
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := b.watch(cancel)
	defer g.stop()
	var (
		p        *controller.Poller
		cs       *counting
		st       *store.Store
		mu       sync.Mutex
		reserved = map[uuid.UUID]time.Time{}
		pollDone = make(chan struct{})
		polls    atomic.Int64
	)
	// stop ends the phase when the guard stopped it: what was measured so far stays, with why.
	stop := func(measuredFrom *sample) error {
		why, last, peak, minAvail := g.stop()
		ph.stopped, ph.peak, ph.minAvail = why, peak, minAvail
		if cs != nil && ph.measured == 0 { // stopped before the measured minute ended (not in the tail)
			if t := cs.listing.Load(); t != 0 {
				ph.inflight = last.at.Sub(time.Unix(0, t))
			}
			ph.polls, ph.lists, ph.listWall = polls.Load(), cs.lists.Load(), time.Duration(cs.listWall.Load())
			ph.discoverWall = time.Duration(cs.allWall.Load())
			ph.states, ph.gets, ph.discoveries = cs.states.Load(), cs.gets.Load(), cs.all.Load()
		}
		if measuredFrom != nil && last.restd != 0 {
			ph.measured = last.at.Sub(measuredFrom.at)
			c, r := b.cpuSecs(*measuredFrom, last)
			ph.ctld, ph.restd = perMinute(c, ph.measured), perMinute(r, ph.measured)
		}
		cancel()
		<-pollDone
		return b.restartRestd(context.Background(), nil) // the next phase, or the clean-up, needs one
	}
	if ph.design != "" {
		// A database of the phase's own, used as the runtime role as the controller uses it.
		w, err := world.Build(ctx, world.Config{Cluster: b.env.Cluster()})
		if err != nil {
			return err
		}
		defer w.Close()
		st = w.Store
		cs = &counting{Slurm: b.c}
		var slurm controller.Slurm = cs
		if ph.design == "full" {
			slurm = untracked{cs}
		}
		p = &controller.Poller{Slurm: slurm, Store: st, Cluster: b.env.Cluster(),
			Lookahead: reconcile.Lookahead{PerPool: 4, PerUser: 2, PerAccount: 3, Window: 8 * 24 * time.Hour},
			Log:       logr.Discard(),
			Enqueue: func(id uuid.UUID) {
				mu.Lock()
				if _, ok := reserved[id]; !ok {
					reserved[id] = time.Now()
				}
				mu.Unlock()
			}}
		// The first poll lists the queue and reserves every Juice job in it: before the measured minute. In both
		// designs it is one listing of the whole queue, so it is also the measure of one listing's cost.
		s0, err := b.sample()
		if err != nil {
			return err
		}
		err = p.Poll(ctx)
		s1, serr := b.sample()
		if g.Tripped() != "" {
			close(pollDone)
			return stop(nil)
		}
		if err != nil {
			return fmt.Errorf("first poll: %w", err)
		}
		if serr != nil {
			return serr
		}
		ph.firstPoll = s1.at.Sub(s0.at)
		ph.first = listing{wall: ph.firstPoll, rss: s1.restdRSS, hwm: s1.restdHWM}
		ph.first.ctld, ph.first.restd = b.cpuSecs(s0, s1)
		ph.firstDone = true
		logf("first poll: %.1f s, slurmctld %.1f CPU s, slurmrestd %.1f CPU s, slurmrestd RSS %d MiB (peak %d MiB), MemAvailable %d MiB",
			ph.firstPoll.Seconds(), ph.first.ctld, ph.first.restd, s1.restdRSS>>20, s1.restdHWM>>20, memAvailable()>>20)
		mu.Lock()
		ph.reservedFirst = len(reserved)
		mu.Unlock()
		if ph.reservedFirst < len(b.juice) {
			return fmt.Errorf("the first poll reserved %d of the %d Juice jobs: the look-ahead did not pick them all", ph.reservedFirst, len(b.juice))
		}
		cs.lists.Store(0)
		cs.all.Store(0)
		cs.states.Store(0)
		cs.gets.Store(0)
		cs.listWall.Store(0)
		cs.allWall.Store(0)
		go func() {
			defer close(pollDone)
			tick := time.NewTicker(b.cfg.poll)
			defer tick.Stop()
			for {
				err := p.Poll(ctx)
				if ctx.Err() != nil {
					return
				}
				polls.Add(1)
				if err != nil {
					atomic.AddInt64(&ph.errs, 1)
					logf("poll failed: %v", err)
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	} else {
		close(pollDone)
	}

	// The measured minute: churn and new Juice jobs, CPU of the daemons.
	submitted := map[uint32]time.Time{}
	s0, err := b.sample()
	if err != nil {
		return err
	}
	churn := time.NewTicker(time.Second)
	newJob := time.NewTicker(b.cfg.newEvery)
	end := time.NewTimer(b.cfg.phase)
	i := 0
loop:
	for {
		select {
		case <-churn.C:
			id := b.plain[i%len(b.plain)]
			i++
			comment := fmt.Sprintf("churn-%d", i)
			if err := b.c.UpdateJob(ctx, id, slurmrest.JobUpdate{Comment: &comment}); err != nil {
				if g.Tripped() != "" {
					break loop
				}
				return fmt.Errorf("churn: %w", err)
			}
		case <-newJob.C:
			at := time.Now()
			id, err := b.submit(ctx, true)
			if err != nil {
				if g.Tripped() != "" {
					break loop
				}
				return fmt.Errorf("new Juice job: %w", err)
			}
			submitted[id] = at
		case <-ctx.Done():
			break loop
		case <-end.C:
			break loop
		}
	}
	churn.Stop()
	newJob.Stop()
	ph.newJobs = len(submitted)
	if g.Tripped() != "" {
		return stop(&s0)
	}
	s1, err := b.sample()
	if err != nil {
		return err
	}
	ph.measured = s1.at.Sub(s0.at)
	c, r := b.cpuSecs(s0, s1)
	ph.ctld, ph.restd = perMinute(c, ph.measured), perMinute(r, ph.measured)
	if p == nil {
		_, _, ph.peak, ph.minAvail = g.stop()
		return nil
	}
	ph.polls = polls.Load() // the minute's, not the tail's
	ph.lists, ph.states, ph.gets, ph.discoveries = cs.lists.Load(), cs.states.Load(), cs.gets.Load(), cs.all.Load()
	ph.listWall, ph.discoverWall = time.Duration(cs.listWall.Load()), time.Duration(cs.allWall.Load())

	// The tail: the poller may still reserve the minute's last new jobs (not measured for CPU).
	deadline := time.Now().Add(b.cfg.tail)
	for {
		seen, err := b.resolve(ctx, st, &mu, reserved, submitted)
		if g.Tripped() != "" {
			return stop(nil)
		}
		if err != nil {
			return err
		}
		if len(seen) == len(submitted) || time.Now().After(deadline) {
			for id, at := range submitted {
				if r, ok := seen[id]; ok {
					ph.fresh = append(ph.fresh, r.Sub(at))
				} else {
					ph.unseen++
				}
			}
			break
		}
		time.Sleep(time.Second)
	}
	cancel()
	<-pollDone
	_, _, ph.peak, ph.minAvail = g.stop()
	return nil
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

func perMinute(secs float64, over time.Duration) float64 {
	if over <= 0 {
		return 0
	}
	return secs * float64(time.Minute) / float64(over)
}

// resolve maps the reservations made so far to the job ids of the new Juice jobs: job id → when reserved.
func (b *bench) resolve(ctx context.Context, st *store.Store, mu *sync.Mutex, reserved map[uuid.UUID]time.Time, submitted map[uint32]time.Time) (map[uint32]time.Time, error) {
	mu.Lock()
	ids := make(map[uuid.UUID]time.Time, len(reserved))
	for id, at := range reserved {
		ids[id] = at
	}
	mu.Unlock()
	seen := map[uint32]time.Time{}
	for jobID := range submitted {
		rs, err := st.ForJob(ctx, jobID)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if at, ok := ids[r.ID]; ok {
				seen[jobID] = at
			}
		}
	}
	return seen, nil
}

// cpuOf is utime+stime (clock ticks) of the process in a pid file.
func cpuOf(pidFile string) (int64, error) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, err
	}
	pid := strings.TrimSpace(string(b))
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, fmt.Errorf("%s names pid %s: %w", pidFile, pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stt, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%s/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return ut + stt, nil
}

func clkTck() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if n, perr := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && perr == nil && n > 0 {
		return float64(n)
	}
	return 100
}

// cleanUp cancels every job the bench submitted and waits (bounded) until slurmctld has purged them, so that the
// test bed's next user does not list 100,000 cancelled jobs for MinJobAge.
func (b *bench) cleanUp() {
	b.mu.Lock()
	all := append([]uint32(nil), b.all...)
	b.mu.Unlock()
	if len(all) == 0 {
		return
	}
	ctx := context.Background()
	logf("cancelling the %d jobs submitted", len(all))
	for _, name := range []string{plainName, juiceName} {
		if out, err := b.env.Command(ctx, "scancel", "--name="+name).CombinedOutput(); err != nil {
			logf("scancel --name=%s: %v: %s", name, err, out)
		}
	}
	// The chroot's next user gets a new slurmrestd, not one that holds what the listings of the large queue left.
	defer func() {
		if err := b.restartRestd(ctx, nil); err != nil {
			logf("%v", err)
		}
	}()
	if b.cfg.purgeWait <= 0 {
		return
	}
	logf("waiting (at most %s) for slurmctld to purge them (MinJobAge)", b.cfg.purgeWait)
	deadline := time.Now().Add(b.cfg.purgeWait)
	sample := []uint32{all[0], all[len(all)/2], all[len(all)-1]}
	for time.Now().Before(deadline) {
		left, err := b.c.JobStates(ctx, sample)
		if err == nil && len(left) == 0 {
			logf("purged")
			return
		}
		time.Sleep(10 * time.Second)
	}
	logf("not purged after %s: the cancelled jobs leave slurmctld after MinJobAge", b.cfg.purgeWait)
}

// ---- report -----------------------------------------------------------------------------------------

func (r *result) write(md *strings.Builder) {
	var base, baseRest float64
	var nb int
	for _, ph := range r.phases {
		if ph.design == "" && ph.skipped == "" && ph.stopped == "" {
			base += ph.ctld
			baseRest += ph.restd
			nb++
		}
	}
	base /= float64(max(nb, 1))
	baseRest /= float64(max(nb, 1))
	fmt.Fprintf(md, "## %d queued jobs, %d of them Juice jobs\n\n", r.size, r.juice)
	r.writeProbe(md)
	fmt.Fprintf(md, "| phase | slurmctld CPU s/min | caused by the controller | slurmrestd CPU s/min | caused by the controller |  polls | listings | listing wall, mean s | job-state requests (known runs) | discoveries (every job's state): count, mean wall s | GETs | first poll: wall s / slurmctld CPU s / slurmrestd CPU s | slurmrestd peak RSS MiB | freshness p50 / max s | new Juice jobs not reserved |\n")
	fmt.Fprintf(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var notes []string
	for _, ph := range r.phases {
		name := ph.name
		if ph.stopped != "" {
			notes = append(notes, fmt.Sprintf("%d", len(notes)+1))
			name = fmt.Sprintf("%s [stopped %d]", ph.name, len(notes))
		}
		if ph.skipped != "" {
			fmt.Fprintf(md, "| %s | %s | | | | | | | | | | | | | |\n", name, ph.skipped)
			continue
		}
		cpu := func(v float64) string {
			if ph.measured == 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f", v)
		}
		if ph.design == "" {
			fmt.Fprintf(md, "| %s | %s | | %s | | | | | | | | | %d | | |\n", name, cpu(ph.ctld), cpu(ph.restd), ph.peak>>20)
			continue
		}
		disc := fmt.Sprintf("%d", ph.discoveries)
		if ph.discoveries > 0 {
			disc += fmt.Sprintf(", %.2f", (ph.discoverWall / time.Duration(ph.discoveries)).Seconds())
		}
		wall := "–"
		if ph.lists > 0 {
			wall = fmt.Sprintf("%.2f", (ph.listWall / time.Duration(ph.lists)).Seconds())
		}
		fresh := "–"
		if len(ph.fresh) > 0 {
			sort.Slice(ph.fresh, func(i, j int) bool { return ph.fresh[i] < ph.fresh[j] })
			fresh = fmt.Sprintf("%.1f / %.1f", ph.fresh[len(ph.fresh)/2].Seconds(), ph.fresh[len(ph.fresh)-1].Seconds())
		}
		errs := ""
		if ph.errs > 0 {
			errs = fmt.Sprintf(" (%d failed)", ph.errs)
		}
		first := "not finished"
		if ph.firstDone {
			first = fmt.Sprintf("%.1f / %.1f / %.1f", ph.first.wall.Seconds(), ph.first.ctld, ph.first.restd)
		}
		caused := func(v, b float64) string {
			if ph.measured == 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f", v-b)
		}
		unseen := fmt.Sprintf("%d of %d", ph.unseen, ph.newJobs)
		if ph.stopped != "" {
			unseen = fmt.Sprintf("– (%d submitted)", ph.newJobs)
		}
		fmt.Fprintf(md, "| %s | %s | %s | %s | %s | %d%s | %d | %s | %d | %s | %d | %s | %d | %s | %s |\n", name, cpu(ph.ctld), caused(ph.ctld, base),
			cpu(ph.restd), caused(ph.restd, baseRest), ph.polls, errs, ph.lists, wall, ph.states, disc, ph.gets, first, ph.peak>>20, fresh, unseen)
	}
	fmt.Fprintf(md, "\n")
	n := 0
	for _, ph := range r.phases {
		if ph.stopped == "" {
			continue
		}
		n++
		var where string
		switch {
		case ph.design != "" && !ph.firstDone:
			where = "during its first poll (one listing of the whole queue, before the measured minute)"
			if ph.inflight > 0 {
				where += fmt.Sprintf(", after that listing had been in flight for %.1f s", ph.inflight.Seconds())
			}
		case ph.measured > 0:
			where = fmt.Sprintf("after %.1f s of its measured %s (its CPU figures are per minute of those seconds)", ph.measured.Seconds(), "minute")
			if ph.inflight > 0 {
				where += fmt.Sprintf(", with a listing in flight for %.1f s", ph.inflight.Seconds())
			}
		default:
			where = "after its measured minute, while waiting for the poller to reserve the minute's new jobs"
		}
		fmt.Fprintf(md, "[stopped %d] %s was stopped by the memory guard %s: %s; the lowest MemAvailable seen was %d MiB. slurmrestd was killed and started anew.\n\n",
			n, ph.name, where, ph.stopped, ph.minAvail>>20)
	}
	r.writePerMinute(md)
	var whole, stopped, skipped []string
	for _, ph := range r.phases {
		switch {
		case ph.skipped != "":
			skipped = append(skipped, ph.name)
		case ph.stopped != "":
			stopped = append(stopped, ph.name)
		default:
			whole = append(whole, ph.name)
		}
	}
	fmt.Fprintf(md, "At %d jobs, measured whole: %s; stopped by the memory guard (partly measured, see above): %s; not run: %s.\n\n",
		r.size, list(whole), list(stopped), list(skipped))
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// writeProbe is the memory probe's table: listings one after another from a new slurmrestd.
func (r *result) writeProbe(md *strings.Builder) {
	if len(r.probe) == 0 {
		return
	}
	fmt.Fprintf(md, "What a listing of the whole queue (`GET jobs`, no `update_time`) costs, up to %d listings one after another from a new slurmrestd, "+
		"for each MALLOC_ARENA_MAX of its environment (none: glibc's default, 8 arenas per core):\n\n", r.probeN)
	fmt.Fprintf(md, "| slurmrestd MALLOC_ARENA_MAX | listing | jobs | wall s | slurmctld CPU s | slurmrestd CPU s | slurmrestd RSS after, MiB | slurmrestd peak RSS, MiB |\n")
	fmt.Fprintf(md, "|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, pr := range r.probe {
		arenas := pr.arenas
		switch arenas {
		case "":
			arenas = "none (glibc's default)"
		case "-":
			arenas = "as running (not restarted)"
		}
		fmt.Fprintf(md, "| %s | start | | | | | %d | |\n", arenas, pr.startRSS>>20)
		for i, l := range pr.lists {
			fmt.Fprintf(md, "| %s | %d | %d | %.1f | %.1f | %.1f | %d | %d |\n", arenas, i+1, l.jobs, l.wall.Seconds(), l.ctld, l.restd, l.rss>>20, l.hwm>>20)
		}
		if pr.stopped != "" {
			fmt.Fprintf(md, "| %s | %d | stopped by the memory guard: %s | | | | | |\n", arenas, len(pr.lists)+1, pr.stopped)
		}
	}
	fmt.Fprintf(md, "\n")
}

// writePerMinute says what one listing's cost means for the full-listings design, which lists at every poll:
// when a listing takes longer than the poll interval, the listings run back to back.
func (r *result) writePerMinute(md *strings.Builder) {
	var one *listing
	from := ""
	for _, ph := range r.phases {
		if ph.design == "full" && ph.firstDone {
			one, from = &ph.first, "the full-listings phase's first poll"
		}
	}
	if one == nil {
		for _, pr := range r.probe {
			if len(pr.lists) > 0 {
				one, from = &pr.lists[0], "the probe's first listing"
				break
			}
		}
	}
	if one == nil || one.wall <= 0 {
		return
	}
	if one.wall <= r.poll {
		fmt.Fprintf(md, "One listing of %d jobs (%s) took %.1f s, within the %s poll interval.\n\n", r.size, from, one.wall.Seconds(), r.poll)
		return
	}
	per := float64(time.Minute) / float64(one.wall)
	fmt.Fprintf(md, "One listing of %d jobs (%s) took %.1f s of wall time, %.1f CPU s of slurmctld and %.1f of slurmrestd: longer than the "+
		"%s poll interval, so the full-listings design (a listing at every poll while anything changes, here every second) lists back to back: "+
		"%.2f listings a minute, about %.1f s of slurmctld CPU and %.1f s of slurmrestd CPU per minute (%.2f and %.2f of a core).\n\n",
		r.size, from, one.wall.Seconds(), one.ctld, one.restd, r.poll, per, one.ctld*per, one.restd*per, one.ctld*per/60, one.restd*per/60)
}

func host() string {
	h, _ := os.Hostname()
	return h
}
