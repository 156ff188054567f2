package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/juice-slurm/juice-slurm/controller/licenses"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// licenseBench is issue 23's benchmark: the P7 array and a burst on one small pool, plain, with the pools as Slurm
// licenses (the test bed's wiring) and with licenses off (job_submit.lua and the controller both: how Juice ran
// before issue 23), side by side in one run. What licenses change is where a job waits when its pool is full:
// in Slurm's queue (PENDING, Reason=Licenses, no node held) or on its nodes, in CONFIGURING, while its prolog waits
// for a session. So beside the time, each Juice kind reports its jobs' time in CONFIGURING waiting for GPUs (from
// Slurm's start of the run to its session being ready, in node-seconds: every job here has one node) and requeues.
type licenseBench struct {
	arrayN, burstN, rounds int
	pool                   string
	gpus                   int
	sleep                  time.Duration
	// activation is the simulator's activation delay: the target is no job in CONFIGURING longer than one.
	activation time.Duration
	// switchTo wires the test bed with licenses and session hand-off (in the pool) on or off, and restarts its
	// controller.
	switchTo func(w wiring) error
}

// wiring is how the test bed is wired for a kind of run: its pools as licenses, and hand-off in the pool.
type wiring struct{ licenses, handoff bool }

type licenseKind struct {
	name  string
	juice bool
	// atOnce runs plain jobs no more at once than the pool's GPUs serve: the peer of Juice's concurrency. An array
	// by its %N; a burst by asking the pool's Slurm license for one (-L juice_<pool>@juice), which needs the test bed
	// wired with licenses on.
	atOnce bool
	wiring
}

// licenseRun is what one array or burst of one kind measured.
type licenseRun struct {
	took time.Duration
	// configuring is each job's time from Slurm's start of its last run to its session being ready (0 when ready
	// before); requeues are the runs Slurm started again (a prolog that gave up requeues a batch job).
	configuring []time.Duration
	requeues    int
}

func (b licenseBench) run(ctx context.Context, env testbed.Env, c *slurmrest.Client, md *strings.Builder) error {
	kinds := []licenseKind{
		{name: "plain"},
		{name: fmt.Sprintf("plain, %d at once (%%%d or -L)", b.gpus, b.gpus), atOnce: true, wiring: wiring{licenses: true}},
		{name: "Juice, licenses on, hand-off on", juice: true, wiring: wiring{licenses: true, handoff: true}},
		{name: "Juice, licenses on", juice: true, wiring: wiring{licenses: true}},
		{name: "Juice, licenses off", juice: true},
	}
	bed := wiring{licenses: true} // the test bed's wiring
	defer func() {
		if bed != (wiring{licenses: true}) {
			_ = b.switchTo(wiring{licenses: true})
		}
	}()
	type workload struct {
		name   string
		rounds int
		submit func(k licenseKind, args ...string) ([]uint32, uint32, error)
	}
	workloads := []workload{
		{fmt.Sprintf("array of %d x `sleep 1`", b.arrayN), 1, func(k licenseKind, args ...string) ([]uint32, uint32, error) {
			spec := fmt.Sprintf("--array=0-%d", b.arrayN-1)
			if k.atOnce {
				spec += fmt.Sprintf("%%%d", b.gpus)
			}
			id, err := sbatch(append(args, spec, "--wrap", "sleep 1")...)
			return nil, id, err
		}},
		{fmt.Sprintf("burst of %d x `sleep %g`", b.burstN, b.sleep.Seconds()), b.rounds, func(k licenseKind, args ...string) ([]uint32, uint32, error) {
			if k.atOnce {
				args = append(args, "-L", licenses.For(request.Request{Pool: b.pool, GPUs: 1})) // what a 1-GPU Juice job takes
			}
			ids, err := submitAtOnce(b.burstN, append(args, "--wrap", fmt.Sprintf("sleep %g", b.sleep.Seconds())))
			return ids, 0, err
		}},
	}
	results := make([][][]licenseRun, len(workloads)) // workload, kind, round
	for w, wl := range workloads {
		results[w] = make([][]licenseRun, len(kinds))
		for round := 0; round < wl.rounds; round++ {
			for k, kind := range kinds {
				if (kind.juice || kind.atOnce) && kind.wiring != bed {
					if err := b.switchTo(kind.wiring); err != nil {
						return err
					}
					bed = kind.wiring
				}
				var args []string
				if kind.juice {
					args = append(args, "--juice-pool="+b.pool)
				}
				fmt.Fprintf(os.Stderr, "licenses: %s, round %d/%d, %s\n", wl.name, round+1, wl.rounds, kind.name)
				ids, array, err := wl.submit(kind, args...)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", wl.name, kind.name, err)
				}
				r, err := b.wait(ctx, env, c, ids, array, kind.juice)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", wl.name, kind.name, err)
				}
				fmt.Fprintf(os.Stderr, "  %.1f s, %d requeues\n", r.took.Seconds(), r.requeues)
				results[w][k] = append(results[w][k], r)
				time.Sleep(3 * time.Second) // the pool's sessions go back (the simulator's cancel delay)
			}
		}
	}
	if bed != (wiring{licenses: true}) {
		if err := b.switchTo(wiring{licenses: true}); err != nil {
			return err
		}
		bed = wiring{licenses: true}
	}

	fmt.Fprintf(md, "### Pools as Slurm licenses: on, off, and plain Slurm (issue 23)\n\n"+
		"On the pool `%s` (%d GPUs; the cluster runs 16 jobs at once), each kind in turn: plain sbatch, Juice with the "+
		"pools as Slurm licenses (job_submit.lua's `JUICE_LICENSES=on`, the controller's `licenses = on`), and Juice "+
		"with both off (`JUICE_TESTBED_LICENSES_ON=off`: the test bed wired and its controller restarted), and Juice "+
		"with licenses and session hand-off on in the pool (`pool.<pool>.handoff = on`: an ended job's session passes to "+
		"the next like job). *In "+
		"CONFIGURING* is each Juice job's time from Slurm's start of its last run to its session being ready (the "+
		"prolog's wait for GPUs, on a node held for it; Slurm's times have a resolution of one second), in "+
		"node-seconds (each job has one node), with the longest; the target is 0 requeues and no job longer than "+
		"one session activation (%s).\n\n"+
		"| workload | kind | seconds (each round) | vs plain | in CONFIGURING, node-s | longest s | requeues |\n"+
		"|---|---|---|---:|---:|---:|---:|\n", b.pool, b.gpus, b.activation)
	for w, wl := range workloads {
		plain := medianTook(results[w][0])
		for k, kind := range kinds {
			if len(results[w][k]) == 0 {
				continue // a kind not run for this workload
			}
			var each []string
			var conf []time.Duration
			requeues := 0
			for _, r := range results[w][k] {
				each = append(each, fmt.Sprintf("%.0f", r.took.Seconds()))
				conf = append(conf, r.configuring...)
				requeues += r.requeues
			}
			confText, longest, reqText := "", "", ""
			if kind.juice {
				var sum, top time.Duration
				for _, d := range conf {
					sum += d
					top = max(top, d)
				}
				confText = fmt.Sprintf("%.0f", sum.Seconds())
				longest = fmt.Sprintf("%.0f", top.Seconds())
				reqText = fmt.Sprint(requeues)
			}
			fmt.Fprintf(md, "| %s | %s | %.0f (%s) | %.2f | %s | %s | %s |\n", wl.name, kind.name,
				medianTook(results[w][k]).Seconds(), strings.Join(each, ", "),
				medianTook(results[w][k]).Seconds()/plain.Seconds(), confText, longest, reqText)
		}
	}
	// Issue 24's floor for the array without hand-off: each element (1 GPU) runs 1 s and pays one activation, the
	// pool's GPUs at a time.
	floor := time.Duration(b.arrayN) * (time.Second + b.activation) / time.Duration(max(1, b.gpus))
	fmt.Fprintf(md, "\nThe array's floor without hand-off (elements × (run + activation) / GPUs, one GPU each): "+
		"%d × (1 s + %s) / %d = %.0f s. Against it:", b.arrayN, b.activation, b.gpus, floor.Seconds())
	for k, kind := range kinds {
		fmt.Fprintf(md, " %s %.2f;", kind.name, medianTook(results[0][k]).Seconds()/floor.Seconds())
	}
	md.WriteString(" (targets: hand-off off at most 1.10 of the floor, hand-off on at most 1.25 of plain).\n\n")
	// Plain Slurm runs 16 jobs at once here, the pool serves 4: the peer at Juice's concurrency is plain 4 at once.
	for w, wl := range workloads {
		atOnce := medianTook(results[w][1])
		if atOnce <= 0 {
			continue
		}
		fmt.Fprintf(md, "The %s against plain at the pool's concurrency (%s):", wl.name, kinds[1].name)
		for k, kind := range kinds {
			if kind.juice {
				fmt.Fprintf(md, " %s %.2f;", kind.name, medianTook(results[w][k]).Seconds()/atOnce.Seconds())
			}
		}
		md.WriteString("\n\n")
	}
	return nil
}

// wait waits for every job (ids, or the elements of array) to end, then reads each Juice job's wait in
// CONFIGURING from its reservation in the demo's database.
func (b licenseBench) wait(ctx context.Context, env testbed.Env, c *slurmrest.Client, ids []uint32, array uint32, juice bool) (licenseRun, error) {
	want := map[uint32]bool{}
	for _, id := range ids {
		want[id] = true
	}
	n := len(ids)
	if array != 0 {
		n = b.arrayN
	}
	deadline := time.Now().Add(time.Duration(n)*10*time.Second + 5*time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		list, err := c.ListJobs(ctx, time.Time{})
		if err != nil {
			return licenseRun{}, err
		}
		var jobs []slurmrest.Job
		for _, j := range list.Jobs {
			mine := want[j.ID] || (array != 0 && j.Array != nil && j.Array.JobID == array && j.Array.HasTask)
			if mine && j.State.IsFinished() {
				jobs = append(jobs, j)
			}
		}
		if len(jobs) < n {
			continue
		}
		var r licenseRun
		var first, last time.Time
		for _, j := range jobs {
			if j.State != slurmrest.StateCompleted {
				return r, fmt.Errorf("job %d ended %s", j.ID, j.State)
			}
			if first.IsZero() || j.SubmitTime.Before(first) {
				first = j.SubmitTime
			}
			if j.EndTime.After(last) {
				last = j.EndTime
			}
			r.requeues += j.Run
		}
		r.took = last.Sub(first)
		if !juice {
			return r, nil
		}
		err = b.configuring(ctx, env, jobs, &r)
		return r, err
	}
	return licenseRun{}, fmt.Errorf("the jobs did not end in time")
}

// configuring reads, from the demo's database, each job's time from Slurm's start of its last run to its session
// being ready.
func (b licenseBench) configuring(ctx context.Context, env testbed.Env, jobs []slurmrest.Job, r *licenseRun) error {
	s, done, err := demoStore(ctx, env)
	if err != nil {
		return err
	}
	defer done()
	for _, j := range jobs {
		rs, err := s.ForJob(ctx, j.ID)
		if err != nil {
			return err
		}
		ready := time.Time{}
		for _, res := range rs {
			if res.Run.Run == j.Run && !res.Status.ReadyAt.IsZero() {
				ready = res.Status.ReadyAt
			}
		}
		if ready.IsZero() {
			return fmt.Errorf("job %d run %d completed with no ready reservation", j.ID, j.Run)
		}
		// Slurm's start is in whole seconds: a session ready within the start's second counts 0.
		r.configuring = append(r.configuring, max(0, ready.Truncate(time.Second).Sub(j.StartTime)))
	}
	return nil
}

// submitAtOnce submits n jobs with args from 8 threads at once.
func submitAtOnce(n int, args []string) ([]uint32, error) {
	ids := make([]uint32, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ids[i], errs[i] = sbatch(args...)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func medianTook(rs []licenseRun) time.Duration {
	var ds []time.Duration
	for _, r := range rs {
		ds = append(ds, r.took)
	}
	slices.Sort(ds)
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)/2]
}

// switchWiring wires the test bed with its pools as licenses or not (job_submit.lua reads JUICE_LICENSES from
// juice-config.sh, which wire writes) and hand-off in the demo's pool or not (the site policy wire writes), and
// restarts its controller to match.
func switchWiring(w wiring) error {
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	for _, step := range []string{"wire", "services-restart"} {
		cmd := exec.Command("bash", "test/testbed.sh", step)
		cmd.Env = append(os.Environ(), "JUICE_TESTBED_LICENSES_ON="+onOff(w.licenses), "JUICE_TESTBED_HANDOFF="+onOff(w.handoff))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("test bed %s with licenses %s, hand-off %s: %w", step, onOff(w.licenses), onOff(w.handoff), err)
		}
	}
	return nil
}
