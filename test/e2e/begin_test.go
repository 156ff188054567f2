//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// A pending job whose --begin time falls inside the look-ahead window (the controller's default, 2 minutes) is
// reserved while it still waits for that time, and starts no earlier than it with its session; one whose begin
// time is beyond the window is not reserved yet.
func TestBeginTimeInsideWindowIsReservedAhead(t *testing.T) {
	s := openStore(t)
	far := sbatch(t, "--begin=now+3600", "--juice-pool=test", "-o", "/dev/null", "--wrap", "true")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(far)))
	outFile := filepath.Join(world.dir, "begin.out")
	job := sbatch(t, "--begin=now+30", "--juice-pool=test", "-o", outFile, "--wrap", "env")
	j := getJob(t, job)
	require.Equal(t, slurmrest.StatePending, j.State)
	require.Equal(t, "BeginTime", j.StateReason)
	begin := j.EligibleTime
	require.False(t, begin.IsZero())

	waitFor(t, 25*time.Second, "reserved while waiting for its begin time", func() bool {
		return stateOf(t, s, run(job, 0)) == reconcile.StateReady
	})
	j = getJob(t, job)
	require.Equal(t, slurmrest.StatePending, j.State, "the session is ready before the job starts")
	require.Equal(t, "BeginTime", j.StateReason, "the begin time is left alone")
	// The poll that reserved the near job saw the far one (submitted first): it is not reserved.
	require.Equal(t, reconcile.State(""), stateOf(t, s, run(far, 0)), "a begin time beyond the window is not reserved yet")

	j = waitJobDone(t, job, 90*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.False(t, j.StartTime.Before(begin), "started at %s, before its begin time %s", j.StartTime, begin)
	b, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, string(b))
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	noLiveSession(t, s, job)
	require.Equal(t, reconcile.State(""), stateOf(t, s, run(far, 0)))
}
