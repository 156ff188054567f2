//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// When a Juice job that Slurm started cannot get its GPUs the user is told why, with a `juice:` line: srun prints
// it (the prolog's scontrol notify), and a requeued batch job carries it in its comment (scontrol show job, squeue
// %k) until a later run is served, when the comment is the request again. With the pools as licenses Slurm starts
// such a job only when a license's count is stale (an agent lost since the last sync): made so here.
func TestUserSeesWhyNoGPUs(t *testing.T) {
	s := openStore(t)
	if licensed() {
		staleLicense(t, "small", 2)
	}
	holder := sbatch(t, "--juice-pool=small", "-o", "/dev/null", "--wrap", "sleep 45")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(holder)))
	waitFor(t, 60*time.Second, "the holder has the pool's only GPU", func() bool { return getJob(t, holder).State == slurmrest.StateRunning })

	out, code := sh(t, 120*time.Second, "srun", "--juice-pool=small", "true")
	require.NotEqual(t, 0, code, out)
	require.Regexp(t, `(?m)^srun: juice: no GPUs within \S+: session \S+ queued at the Juice Controller \(the pool has no free GPU that fits\)$`, out)

	outFile := filepath.Join(world.dir, "reason.out")
	job := sbatch(t, "--juice-pool=small", "-o", outFile, "--wrap", "env")
	waitFor(t, 90*time.Second, "the job is requeued", func() bool { return getJob(t, job).Run >= 1 })
	show := scontrolShow(t, job)
	require.Regexp(t, `Comment=juice: no GPUs within \S+: session \S+ queued at the Juice Controller`, show)
	q, _ := sh(t, 10*time.Second, "squeue", "-h", "-j", strconv.Itoa(int(job)), "-o", "%k")
	require.True(t, strings.HasPrefix(strings.TrimSpace(q), "juice: no GPUs within"), "squeue %%k: %q", q)

	j := waitJobDone(t, job, 4*time.Minute)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.Equal(t, "juice:v1:pool=small,gpus=1", j.Comment, "served: the comment is the request again")
	b, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, string(b))
	noLiveSession(t, s, job)
	noLiveSession(t, s, holder)
}

// With the controller down, srun says so.
func TestUserSeesControllerUnreachable(t *testing.T) {
	testbed.StopProcess(world.controller)
	t.Cleanup(func() { require.NoError(t, startController()) })
	out, code := sh(t, 120*time.Second, "srun", "--juice-pool=test", "true")
	require.NotEqual(t, 0, code, out)
	require.Regexp(t, `(?m)^srun: juice: no GPUs within \S+: the juice-slurm controller is unreachable`, out)
}
