// Command juice-bench-slurm measures the benchmarks that need the real Slurm cluster of the test bed, wired and
// with the controller and simulator of `make demo` running:
//
//	P2  submit → RUNNING for sbatch with --juice-* against plain sbatch on the same cluster, interleaved, as a ratio
//	P4  slurmrestd requests per poll with many held jobs in the queue, and how a poll's cost grows with the
//	    number of jobs that changed since the last poll
//
// Nothing is asserted on time; the figures are printed and written as Markdown to -out.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
	"github.com/juice-slurm/juice-slurm/test/world"
)

func main() {
	n := flag.Int("p2-jobs", 20, "P2: jobs of each kind")
	held := flag.Int("p4-held", 10000, "P4: held jobs in the queue (0 skips P4)")
	out := flag.String("out", "", "write the Markdown section here")
	pollDesc := flag.String("poll", "1 s", "the controller's poll interval, for the report")
	simDesc := flag.String("sim", "500 ms tick, 1 s activation", "the simulator's timing, for the report")
	arrayN := flag.Int("array", 0, "P7: elements of the job array (0 skips P7)")
	arrayPool := flag.String("array-pool", "demo", "P7: the Juice pool")
	arrayGPUs := flag.Int("array-pool-gpus", 4, "P7: the pool's GPUs, for the floor")
	arrayCancel := flag.Duration("array-cancel-delay", 500*time.Millisecond, "P7: the simulator's cancel delay, for the floor")
	arrayActivate := flag.Duration("array-activate-delay", time.Second, "P7: the simulator's activation delay, for the floor with it")
	burstN := flag.Int("burst", 0, "bursts: jobs submitted at once (0 skips): plain, Juice, Juice without look-ahead")
	burstRounds := flag.Int("burst-rounds", 3, "bursts: rounds of the three kinds")
	burstPool := flag.String("burst-pool", "test", "bursts: the Juice pool")
	burstSleep := flag.Duration("burst-sleep", 2*time.Second, "bursts: each job's run time")
	burstGPUs := flag.Int("burst-pool-gpus", 16, "bursts: the pool's GPUs, for the report")
	burstSlots := flag.Int("burst-slots", 16, "bursts: jobs the cluster runs at once, for the report (2 nodes of 2 cores, OverSubscribe=FORCE:4)")
	licArray := flag.Int("licenses-array", 0, "licenses on/off/plain (issue 23): elements of the job array (0 skips the comparison)")
	licBurst := flag.Int("licenses-burst", 30, "licenses on/off/plain: jobs of the burst")
	licRounds := flag.Int("licenses-rounds", 3, "licenses on/off/plain: rounds of the burst's three kinds")
	licPool := flag.String("licenses-pool", "demo", "licenses on/off/plain: the Juice pool (a small one: its license fills)")
	licGPUs := flag.Int("licenses-pool-gpus", 4, "licenses on/off/plain: the pool's GPUs, for the report")
	flag.Parse()
	env, err := testbed.Load(testbed.EnvFile())
	if err != nil {
		fail(err)
	}
	slurm, err := slurmrest.New(slurmrest.Config{BaseURL: env.SlurmrestdURL(), UserName: env.SlurmUser(),
		TokenSource: slurmrest.FileToken(env.TokenFile())})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	var md strings.Builder
	var parts []string
	for _, p := range []struct {
		name string
		on   bool
	}{{"P2", *n > 0}, {"P7", *arrayN > 0}, {"bursts", *burstN > 0}, {"licenses", *licArray > 0}, {"P4", *held > 0}} {
		if p.on {
			parts = append(parts, p.name)
		}
	}
	which := strings.Join(parts, ", ")
	fmt.Fprintf(&md, "## Benchmarks on the real Slurm %s cluster (%s)\n\n`go run ./test/bench/cmd/juice-bench-slurm` on %s, %s UTC; "+
		"%d compute nodes (2 cores in all) with the SPANK plugin, job_submit.lua and the hooks wired; the test bed's controller (%s polls) "+
		"and juice-sim (%s) running. Nothing is asserted on time.\n\n",
		release(ctx, slurm), which, host(), time.Now().UTC().Format("2006-01-02 15:04"), max(1, len(env.Nodes())), *pollDesc, *simDesc)
	if *n > 0 {
		if err := p2(ctx, slurm, *n, &md); err != nil {
			fail(err)
		}
	}
	if *arrayN > 0 {
		b := arrayBench{n: *arrayN, pool: *arrayPool, gpus: *arrayGPUs, cancelDelay: *arrayCancel, activateDelay: *arrayActivate}
		if err := b.run(ctx, env, slurm, &md); err != nil {
			fail(err)
		}
	}
	if *burstN > 0 {
		b := burstBench{n: *burstN, rounds: *burstRounds, pool: *burstPool, sleep: *burstSleep,
			poolGPUs: *burstGPUs, slots: *burstSlots, restart: restartServices}
		if err := b.run(ctx, env, slurm, &md); err != nil {
			fail(err)
		}
	}
	if *licArray > 0 {
		b := licenseBench{arrayN: *licArray, burstN: *licBurst, rounds: *licRounds, pool: *licPool, gpus: *licGPUs,
			sleep: *burstSleep, activation: *arrayActivate, switchTo: switchWiring}
		if err := b.run(ctx, env, slurm, &md); err != nil {
			fail(err)
		}
	}
	if *held > 0 {
		if err := p4(ctx, env, slurm, *held, &md); err != nil {
			fail(err)
		}
	}
	fmt.Print(md.String())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md.String()), 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "juice-bench-slurm:", err)
	os.Exit(1)
}

func host() string { h, _ := os.Hostname(); return h }

func release(ctx context.Context, c *slurmrest.Client) string {
	if err := c.Ping(ctx); err != nil {
		return "?"
	}
	return c.SlurmRelease()
}

func sbatch(args ...string) (uint32, error) {
	cmd := exec.Command("sbatch", append([]string{"--parsable", "-o", "/dev/null"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_JWT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("sbatch %v: %v: %s", args, err, out)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(strings.Split(string(out), ";")[0]), 10, 32)
	return uint32(id), err
}

// p2 submits the two kinds of job one after the other, alternating, each on an idle node, and times from the
// sbatch call to the first sight of RUNNING (polled every 20 ms through slurmrestd).
func p2(ctx context.Context, c *slurmrest.Client, n int, md *strings.Builder) error {
	fmt.Fprintln(os.Stderr, "P2: submit → RUNNING, plain against --juice-pool, interleaved")
	var plain, juice []time.Duration
	for i := 0; i < 2*n; i++ {
		args := []string{"--wrap", "sleep 1"}
		isJuice := i%2 == 1
		if isJuice {
			args = append([]string{"--juice-pool=test"}, args...)
		}
		start := time.Now()
		id, err := sbatch(args...)
		if err != nil {
			return err
		}
		for {
			j, err := c.GetJob(ctx, id)
			if err != nil {
				return err
			}
			if j.State == slurmrest.StateRunning || j.State.IsFinished() || j.State == slurmrest.StateCompleting {
				break
			}
			if time.Since(start) > 2*time.Minute {
				return fmt.Errorf("job %d not running after 2 minutes (%s, %s)", id, j.State, j.StateReason)
			}
			time.Sleep(20 * time.Millisecond)
		}
		d := time.Since(start)
		if isJuice {
			juice = append(juice, d)
		} else {
			plain = append(plain, d)
		}
		// Let the job end, so every submission meets an idle node.
		for {
			j, err := c.GetJob(ctx, id)
			if err != nil || j.State.IsFinished() {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	p, j := stats(plain), stats(juice)
	fmt.Fprintf(md, "### P2: submit → RUNNING, sbatch with --juice-pool against plain sbatch\n\n"+
		"%d jobs of each kind, alternating, each submitted to an idle node; time from the sbatch call to the first "+
		"RUNNING seen through slurmrestd (20 ms polling). The Juice job is reserved while PENDING, then the prolog "+
		"fetches its ready session.\n\n", n)
	fmt.Fprintf(md, "| kind | p50 ms | p90 ms | max ms | mean ms |\n|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(md, "| plain sbatch | %s | %s | %s | %s |\n", ms(p.p50), ms(p.p90), ms(p.max), ms(p.mean))
	fmt.Fprintf(md, "| sbatch --juice-pool=test | %s | %s | %s | %s |\n", ms(j.p50), ms(j.p90), ms(j.max), ms(j.mean))
	ratio := float64(j.p50) / float64(p.p50)
	fmt.Fprintf(md, "\nRatio of medians (juice / plain): **%.2f**; of means: %.2f. Target ≤ 1.10: %s.\n\n", ratio,
		float64(j.mean)/float64(p.mean), verdict(ratio <= 1.10))
	return nil
}

type st struct{ p50, p90, max, mean time.Duration }

func stats(ds []time.Duration) st {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return st{s[len(s)/2], s[len(s)*9/10], s[len(s)-1], sum / time.Duration(len(s))}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// countingSlurm counts the requests a poll makes.
type countingSlurm struct {
	controller.Slurm
	n atomic.Int64
}

func (c *countingSlurm) ListJobs(ctx context.Context, since time.Time) (slurmrest.JobList, error) {
	c.n.Add(1)
	return c.Slurm.ListJobs(ctx, since)
}

func (c *countingSlurm) GetJob(ctx context.Context, id uint32) (*slurmrest.Job, error) {
	c.n.Add(1)
	return c.Slurm.GetJob(ctx, id)
}

// p4 fills the queue with held jobs (submitted through slurmrestd, 8 at a time), then runs a real Poller over a
// database of its own and counts slurmrestd requests and time per poll: with nothing changed, and after k jobs
// changed (their comment updated).
func p4(ctx context.Context, env testbed.Env, c *slurmrest.Client, held int, md *strings.Builder) error {
	fmt.Fprintf(os.Stderr, "P4: submitting %d held jobs\n", held)
	start := time.Now()
	var ids []uint32
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr atomic.Value
	next := atomic.Int64{}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(held) {
				id, err := c.SubmitJob(ctx, slurmrest.JobSubmission{Script: "#!/bin/sh\ntrue\n", Name: "bench-held",
					Partition: env.Partition(), Hold: true})
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				mu.Lock()
				ids = append(ids, id)
				if len(ids)%2000 == 0 {
					fmt.Fprintf(os.Stderr, "P4: %d held jobs submitted (%s)\n", len(ids), time.Since(start).Round(time.Second))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	defer func() {
		fmt.Fprintln(os.Stderr, "P4: cancelling the held jobs")
		_ = exec.Command("scancel", "--name=bench-held").Run()
	}()
	if err, _ := firstErr.Load().(error); err != nil {
		return fmt.Errorf("submit held jobs (%d done): %w", len(ids), err)
	}
	submitTook := time.Since(start)

	// A database of its own, used as the runtime role as the controller uses it.
	w, err := world.Build(ctx, world.Config{Cluster: env.Cluster()})
	if err != nil {
		return err
	}
	defer w.Close()
	st := w.Store
	cs := &countingSlurm{Slurm: c}
	p := &controller.Poller{Slurm: cs, Store: st, Cluster: env.Cluster(), Lookahead: reconcile.DefaultLookahead,
		Log: logr.Discard(), Enqueue: func(uuid.UUID) {}}
	poll := func() (int64, time.Duration, error) {
		before := cs.n.Load()
		t := time.Now()
		err := p.Poll(ctx)
		return cs.n.Load() - before, time.Since(t), err
	}
	if _, _, err := poll(); err != nil { // the first poll lists everything
		return err
	}
	time.Sleep(1100 * time.Millisecond) // update_time has one-second resolution
	type row struct {
		what     string
		requests int64
		took     time.Duration
	}
	var rows []row
	for i := 0; i < 3; i++ {
		n, d, err := poll()
		if err != nil {
			return err
		}
		rows = append(rows, row{"nothing changed", n, d})
	}
	for _, k := range []int{1, 10, 100, 1000} {
		for i := 0; i < k; i++ {
			comment := fmt.Sprintf("bench-%d", i)
			if err := c.UpdateJob(ctx, ids[i], slurmrest.JobUpdate{Comment: &comment}); err != nil {
				return err
			}
		}
		n, d, err := poll()
		if err != nil {
			return err
		}
		rows = append(rows, row{fmt.Sprintf("%d jobs changed", k), n, d})
		time.Sleep(1100 * time.Millisecond)
	}
	fmt.Fprintf(md, "### P4: slurmrestd requests per poll, %d held jobs in the queue\n\n", len(ids))
	fmt.Fprintf(md, "Held jobs submitted through slurmrestd in %s; a real `controller.Poller` (API %s) over its own database, "+
		"counting its requests to slurmrestd.\n\n| poll | slurmrestd requests | wall ms |\n|---|---:|---:|\n", submitTook.Round(time.Second), c.Version())
	maxReq := int64(0)
	for _, r := range rows {
		fmt.Fprintf(md, "| %s | %d | %.1f |\n", r.what, r.requests, float64(r.took)/float64(time.Millisecond))
		maxReq = max(maxReq, r.requests)
	}
	fmt.Fprintf(md, "\nTarget one or two requests per poll: %s (at most %d). With `update_time`, slurmctld answers "+
		"\"nothing changed\" without a body, and any change returns the whole queue: a poll's cost grows with the queue, "+
		"not with the number of changed jobs. The poller then compares only Juice jobs (none here) with the open "+
		"reservations.\n\n", verdict(maxReq <= 2), maxReq)
	return nil
}
