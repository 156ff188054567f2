//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// slurmctld restarted while a Juice job's PrologSlurmctld waits for its session: the job still completes. 22.05
// and 24.11 run the killed prolog again. 26.05 takes the killed prolog for done and recovers a batch step it never
// launched: the job would stay RUNNING with nothing on its node, but the controller sees it run without its
// session file (reconcile.Stranded) and requeues it, and its next run completes. Without that, this test fails on
// 26.05 at its deadline.
func TestSlurmctldRestartDuringAPrologLosesNoJob(t *testing.T) {
	if world.sim == nil {
		t.Skip("needs juice-sim's process to hold the session back (not the legacy controller)")
	}
	s := openStore(t)
	// The controller looks for stranded runs once the state directory is proven the hooks' (sweep.Strands: the
	// prolog's mark, or a running job's file there): a Juice job runs throughout, whose prolog leaves the mark on a
	// bed that has none yet, and the test goes on once a controller has said so (the log may hold an earlier
	// controller's line too: the one running now finds the mark at its next look anyway).
	prover := sbatch(t, "--juice-pool=test", "-o", "/dev/null", "--wrap", "sleep 600")
	t.Cleanup(func() { _, _ = slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(prover))) })
	waitFor(t, 90*time.Second, "the controller has seen a running job's session file", func() bool {
		b, _ := os.ReadFile(world.ctlLog)
		return bytes.Contains(b, []byte("runs without theirs are looked for"))
	})
	// juice-sim stopped: the controller's requests wait, so the prolog waits for its session.
	require.NoError(t, world.sim.Process.Signal(syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			require.NoError(t, world.sim.Process.Signal(syscall.SIGCONT))
		}
	}
	t.Cleanup(resume)
	job := sbatch(t, "--juice-pool=test", "-o", "/dev/null", "--wrap", "sleep 2")
	t.Cleanup(func() { _, _ = slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(job))) })
	waitFor(t, 60*time.Second, "the job in its prolog (CONFIGURING)", func() bool {
		return getJob(t, job).State == slurmrest.StateConfiguring
	})
	time.Sleep(time.Second)

	testbed.StopPidFile(filepath.Join(world.env.RunDir(), "slurmctld.pid"))
	up := world.env.UpCommand(world.repo)
	out, err := exec.Command(up[0], up[1:]...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	resume()

	// Slurm's answers come back once the new slurmctld serves; the stranded run waits reconcile.StrandedAfter and
	// the next look (every 30 s) before it is requeued.
	var j *slurmrest.Job
	waitFor(t, 4*time.Minute, "the job completes after slurmctld's restart", func() bool {
		got, err := world.slurm.GetJob(context.Background(), job)
		if err != nil {
			return false
		}
		j = got
		return j.State.IsFinished()
	})
	require.Equal(t, slurmrest.StateCompleted, j.State, "job %d ended %s (%s)", job, j.State, j.StateReason)
	waitFor(t, time.Minute, "its last run's session released", func() bool {
		return stateOf(t, s, run(job, j.Run)) == reconcile.StateReleased
	})
	t.Logf("job %d completed in run %d (run 0's prolog killed by slurmctld's stop)", job, j.Run)
}
