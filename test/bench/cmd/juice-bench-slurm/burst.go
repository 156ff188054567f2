package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// burstBench is issue 14's item 6: n jobs of `sleep 2` submitted at once, plain, with --juice-pool, and with
// --juice-pool while the controller reserves nothing ahead (a session asked for only when the prolog runs, as
// in the original plugin's design); the time from the first submission to the moment every job has ended.
// Rounds interleave the kinds so that a drift of the machine's load falls on all of them alike.
type burstBench struct {
	n, rounds int
	pool      string
	// poolGPUs and slots are for the report: the pool's GPUs, and how many jobs the cluster runs at once.
	poolGPUs, slots int
	sleep           time.Duration
	// restart brings the test bed's controller back with extra arguments (none: the test bed's own).
	restart func(args string) error
}

type burstKind struct {
	name, args, controllerArgs string
}

func (b burstBench) run(ctx context.Context, env testbed.Env, c *slurmrest.Client, md *strings.Builder) error {
	kinds := []burstKind{
		{name: "plain sbatch"},
		{name: "--juice-pool=" + b.pool, args: "--juice-pool=" + b.pool},
		{name: "--juice-pool=" + b.pool + ", no look-ahead", args: "--juice-pool=" + b.pool,
			controllerArgs: "--lookahead-per-pool 0 --lookahead-window 0s"},
	}
	took := make([][]time.Duration, len(kinds))
	ahead := make([][2]int, len(kinds))
	toReady := make([][]time.Duration, len(kinds))
	current := ""
	defer func() {
		if current != "" {
			_ = b.restart("")
		}
	}()
	for round := 0; round < b.rounds; round++ {
		for k, kind := range kinds {
			if kind.controllerArgs != current {
				if err := b.restart(kind.controllerArgs); err != nil {
					return err
				}
				current = kind.controllerArgs
			}
			fmt.Fprintf(os.Stderr, "burst round %d/%d: %d jobs, %s\n", round+1, b.rounds, b.n, kind.name)
			d, started, err := b.burst(ctx, c, kind.args)
			if err != nil {
				return fmt.Errorf("burst %s: %w", kind.name, err)
			}
			took[k] = append(took[k], d)
			if kind.args != "" {
				a, t, tr, err := readyWhenStarted(ctx, env, started)
				if err != nil {
					return err
				}
				toReady[k] = append(toReady[k], tr...)
				ahead[k][0] += a
				ahead[k][1] += t
			}
			fmt.Fprintf(os.Stderr, "  %.1f s\n", d.Seconds())
		}
	}
	if current != "" {
		if err := b.restart(""); err != nil {
			return err
		}
		current = ""
	}
	plain := stats(took[0]).p50
	sleepArg := fmt.Sprintf("sleep %g", b.sleep.Seconds())
	fmt.Fprintf(md, "### Bursts: %d jobs of `%s` submitted at once (issue 14 item 6)\n\n"+
		"`sbatch --wrap '%s'` %d times from 8 threads at once, plain, with `--juice-pool=%s`, and with it while "+
		"the controller runs with `--lookahead-per-pool 0 --lookahead-window 0s` (a session asked for only when the "+
		"prolog runs); %d rounds, the kinds interleaved in each. Time from the first sbatch call to the first poll "+
		"(200 ms apart, through slurmrestd) that sees every job ended. The simulator's activation delay (assigned → "+
		"active) is 1 s, its tick 500 ms, its cancel delay 500 ms; the pool has %d GPUs and the cluster runs %d jobs "+
		"at once.\n\n"+
		"| kind | median s | each round s | vs plain | sessions ready before the job's start second | reservation → ready, p50 / max s |\n|---|---:|---|---:|---:|---:|\n",
		b.n, sleepArg, sleepArg, b.n, b.pool, b.rounds, b.poolGPUs, b.slots)
	for k, kind := range kinds {
		var each []string
		for _, d := range took[k] {
			each = append(each, fmt.Sprintf("%.1f", d.Seconds()))
		}
		readyText, startText := "", ""
		if kind.args != "" {
			readyText = fmt.Sprintf("%d of %d", ahead[k][0], ahead[k][1])
			if len(toReady[k]) > 0 {
				st := stats(toReady[k])
				startText = fmt.Sprintf("%.1f / %.1f", st.p50.Seconds(), st.max.Seconds())
			}
		}
		fmt.Fprintf(md, "| %s | %.1f | %s | %.2f | %s | %s |\n", kind.name, stats(took[k]).p50.Seconds(), strings.Join(each, ", "),
			stats(took[k]).p50.Seconds()/plain.Seconds(), readyText, startText)
	}
	ratio := stats(took[1]).p50.Seconds() / plain.Seconds()
	fmt.Fprintf(md, "\nJuice against plain (medians): **%.2f**. Target ≤ 1.10: %s.\n\n", ratio, verdict(ratio <= 1.10))
	fmt.Fprintf(md, "Why, from the reservations' times: the jobs of a wave start as soon as they are submitted or a "+
		"slot frees, so nothing can be reserved for them ahead, and each waits in its prolog for a session to start "+
		"(the last column: the simulator's activation delay and tick, and our own passes). With no more GPUs in the "+
		"pool than the cluster runs jobs, the pending ones reserved ahead (2 per user by default) cannot start a "+
		"session either until the running wave's sessions are released. So each wave of %d pays about one session "+
		"start: about plain + waves × (activation + tick) is the floor with this simulator.\n\n", b.slots)
	return nil
}

// burst submits b.n jobs at once and waits for all of them to end.
func (b burstBench) burst(ctx context.Context, c *slurmrest.Client, juiceArg string) (time.Duration, map[uint32]time.Time, error) {
	args := []string{"--wrap", fmt.Sprintf("sleep %g", b.sleep.Seconds())} // the same text as the report's
	if juiceArg != "" {
		args = append([]string{juiceArg}, args...)
	}
	start := time.Now()
	ids, err := submitAtOnce(b.n, args)
	if err != nil {
		return 0, nil, err
	}
	started := map[uint32]time.Time{}
	want := map[uint32]bool{}
	for _, id := range ids {
		want[id] = true
	}
	deadline := start.Add(time.Duration(b.n)*10*time.Second + time.Minute)
	for time.Now().Before(deadline) {
		// A full listing, not JobStates: 22.05's API (v0.0.38) has no jobs/state, and the queue is small.
		list, err := c.ListJobs(ctx, time.Time{})
		if err != nil {
			return 0, nil, err
		}
		ended, failed := 0, 0
		for _, j := range list.Jobs {
			if !want[j.ID] || !j.State.IsFinished() {
				continue
			}
			ended++
			started[j.ID] = j.StartTime
			if j.State != slurmrest.StateCompleted {
				failed++
			}
		}
		if ended == b.n {
			d := time.Since(start)
			if failed > 0 {
				return 0, nil, fmt.Errorf("%d of %d jobs did not complete", failed, b.n)
			}
			// Let the pool's sessions go back before the next burst (the simulator's cancel delay).
			time.Sleep(3 * time.Second)
			return d, started, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return 0, nil, fmt.Errorf("the burst did not end in time")
}

// readyWhenStarted counts the jobs whose reservation, in the demo's database, was ready before the second in
// which Slurm started the job (Slurm's times have a resolution of one second, so this undercounts: a session
// ready a moment before its job started in the same second is not counted).
// It also returns each reservation's time from its creation to its session's readiness.
func readyWhenStarted(ctx context.Context, env testbed.Env, started map[uint32]time.Time) (ahead, total int, toReady []time.Duration, err error) {
	s, done, err := demoStore(ctx, env)
	if err != nil {
		return 0, 0, nil, err
	}
	defer done()
	for id, at := range started {
		rs, err := s.ForJob(ctx, id)
		if err != nil {
			return 0, 0, nil, err
		}
		n, t, err := countEvents(ctx, s, rs, func(e reconcile.Transition) bool {
			return e.Event == reconcile.EventActive && e.At.Before(at)
		})
		if err != nil {
			return 0, 0, nil, err
		}
		ahead, total = ahead+n, total+t
		for _, r := range rs {
			if !r.Status.ReadyAt.IsZero() {
				toReady = append(toReady, r.Status.ReadyAt.Sub(r.CreatedAt))
			}
		}
	}
	return ahead, total, toReady, nil
}

// restartServices restarts the test bed's simulator and controller, the controller with extra arguments.
func restartServices(args string) error {
	cmd := exec.Command("bash", "test/testbed.sh", "services-restart")
	cmd.Env = append(os.Environ(), "JUICE_TESTBED_CONTROLLER_ARGS="+args)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("restarting the test bed's services with %q: %w", args, err)
	}
	return nil
}
