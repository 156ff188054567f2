package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// arrayBench is P7: a job array of n elements of `sleep 1`, plain and with --juice-pool, one after the other on
// the idle cluster, beside the floor the pool allows: with sessions reserved ahead a GPU is busy for an element's
// run and its release, so n elements of one GPU take at least n x (1 s + cancel delay) / GPUs.
type arrayBench struct {
	n           int
	pool        string
	gpus        int
	cancelDelay time.Duration
	// activateDelay is the simulator's time from assigned to active: a GPU is held while its session starts, so
	// with nothing to overlap it (the pool full) it is part of each element's turn too.
	activateDelay time.Duration
}

func (b arrayBench) run(ctx context.Context, env testbed.Env, c *slurmrest.Client, md *strings.Builder) error {
	plain, _, err := b.array(ctx, c)
	if err != nil {
		return err
	}
	juice, id, err := b.array(ctx, c, "--juice-pool="+b.pool)
	if err != nil {
		return err
	}
	floor := time.Duration(b.n) * (time.Second + b.cancelDelay) / time.Duration(b.gpus)
	withStart := time.Duration(b.n) * (time.Second + b.cancelDelay + b.activateDelay) / time.Duration(b.gpus)
	ahead, total, err := readyWhenBound(ctx, env, id)
	aheadText := fmt.Sprintf("%d of %d", ahead, total)
	if err != nil {
		aheadText = "not read: " + err.Error()
	}
	fmt.Fprintf(md, "### P7: a job array at the pool's pace\n\n"+
		"`sbatch --array=0-%d --wrap 'sleep 1'`, plain and with `--juice-pool=%s` (%d GPUs, the simulator's cancel "+
		"delay %s), one after the other on the idle cluster; time from the first element's submission to the last "+
		"one's end (Slurm's times, 1 s resolution). The floor is %d x (1 s + %s) / %d.\n\n"+
		"| array | elements | seconds | vs plain | vs floor |\n|---|---:|---:|---:|---:|\n",
		b.n-1, b.pool, b.gpus, b.cancelDelay, b.n, b.cancelDelay, b.gpus)
	fmt.Fprintf(md, "| plain | %d | %.0f | 1.00 | |\n", b.n, plain.Seconds())
	fmt.Fprintf(md, "| --juice-pool=%s | %d | %.0f | %.2f | %.2f |\n", b.pool, b.n, juice.Seconds(), juice.Seconds()/plain.Seconds(),
		juice.Seconds()/floor.Seconds())
	fmt.Fprintf(md, "| floor | %d | %.0f | %.2f | 1.00 |\n", b.n, floor.Seconds(), floor.Seconds()/plain.Seconds())
	fmt.Fprintf(md, "| floor with the session's start (%s) | %d | %.0f | %.2f | %.2f |\n\n", b.activateDelay, b.n,
		withStart.Seconds(), withStart.Seconds()/plain.Seconds(), withStart.Seconds()/floor.Seconds())
	fmt.Fprintf(md, "Elements of the Juice array whose session was ready before slurmctld gave them a job id (reserved "+
		"ahead, ready when bound): %s.\n\n", aheadText)
	return nil
}

// array submits one array and waits for all its elements to end; it returns the time from its submission to the
// last end, and the array's job id.
func (b arrayBench) array(ctx context.Context, c *slurmrest.Client, args ...string) (time.Duration, uint32, error) {
	id, err := sbatch(append(args, fmt.Sprintf("--array=0-%d", b.n-1), "--wrap", "sleep 1")...)
	if err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(time.Duration(b.n)*5*time.Second + 2*time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		list, err := c.ListJobs(ctx, time.Time{})
		if err != nil {
			return 0, id, err
		}
		var first, last time.Time
		done, failed := 0, 0
		for _, j := range list.Jobs {
			if j.Array == nil || j.Array.JobID != id || !j.Array.HasTask || !j.State.IsFinished() {
				continue
			}
			done++
			if j.State != slurmrest.StateCompleted {
				failed++
			}
			if first.IsZero() || j.SubmitTime.Before(first) {
				first = j.SubmitTime
			}
			if j.EndTime.After(last) {
				last = j.EndTime
			}
		}
		if done == b.n {
			if failed > 0 {
				return 0, id, fmt.Errorf("array %d: %d of %d elements did not complete", id, failed, b.n)
			}
			return last.Sub(first), id, nil
		}
	}
	return 0, id, fmt.Errorf("array %d did not end in time", id)
}

// readyWhenBound counts the array's elements whose reservation was ready when it was bound to the element's job,
// in the demo's database.
func readyWhenBound(ctx context.Context, env testbed.Env, array uint32) (ahead, total int, err error) {
	s, done, err := demoStore(ctx, env)
	if err != nil {
		return 0, 0, err
	}
	defer done()
	rs, err := s.ForArray(ctx, array)
	if err != nil {
		return 0, 0, err
	}
	return countEvents(ctx, s, rs, func(e reconcile.Transition) bool {
		return e.Event == reconcile.EventBound && e.From == reconcile.StateReady
	})
}

// demoStore opens the demo's database, whose URL testbed.sh services writes into the test bed's env file.
func demoStore(ctx context.Context, env testbed.Env) (*store.Store, func(), error) {
	url := env.Get("JUICE_TESTBED_DEMO_DB_URL")
	if url == "" {
		return nil, nil, fmt.Errorf("no JUICE_TESTBED_DEMO_DB_URL in the test bed's env file")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	return store.New(pool, env.Cluster()), pool.Close, nil
}

// countEvents counts the reservations with at least one event that matches.
func countEvents(ctx context.Context, s *store.Store, rs []reconcile.Reservation, match func(reconcile.Transition) bool) (n, total int, err error) {
	for _, r := range rs {
		evs, err := s.Events(ctx, r.ID)
		if err != nil {
			return 0, 0, err
		}
		for _, e := range evs {
			if match(e) {
				n++
				break
			}
		}
	}
	return n, len(rs), nil
}
