//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// juiceSlurmKey runs `juice-slurm key ...` on the test bed's cluster key (the controller's and, on this bed, the
// compute nodes' file: they share the slurmctld host's /etc/juice-slurm).
func juiceSlurmKey(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return sh(t, 30*time.Second, filepath.Join(world.repo, "bin/juice-slurm"),
		append([]string{"key"}, append(args, "--config=", "--cluster-key", world.env.ClusterKey())...)...)
}

// sealedKeyID is the key id in the header of the run's sealed session, as the controller stored it.
func sealedKeyID(t *testing.T, s *store.Store, id reconcile.RunID) string {
	t.Helper()
	r, err := s.ForRun(context.Background(), id)
	require.NoError(t, err)
	sealed, err := s.Sealed(context.Background(), r.ID)
	require.NoError(t, err)
	h, err := session.HeaderOf(sealed)
	require.NoError(t, err)
	require.Equal(t, 2, h.Version)
	require.Equal(t, r.ID, h.Binding.Reservation, "the file names its reservation")
	return h.KeyID
}

// The cluster key is rotated while a job is pending with its session sealed under the old key: the job still
// runs with its GPUs (the plugin opens the file under the previous key), and the next job's session is sealed
// under the new key. Then the previous key is retired.
func TestKeyRotationKeepsPendingJobsGPUs(t *testing.T) {
	s := openStore(t)
	keyFile := world.env.ClusterKey()
	_, err := os.Stat(keyFile + session.PreviousSuffix)
	require.True(t, os.IsNotExist(err), "a previous key is installed on the test bed (%s): retire it first", keyFile+session.PreviousSuffix)
	old, err := session.KeyFile(keyFile).Bytes()
	require.NoError(t, err)

	// Pending for its begin time, inside the look-ahead window: reserved and sealed before it runs.
	outFile := filepath.Join(world.dir, "rotation.out")
	job := sbatch(t, "--begin=now+25", "--juice-pool=test", "-o", world.env.JobPath(outFile), "--wrap", "env")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(job)))
	waitFor(t, 22*time.Second, "the pending job's session is ready", func() bool {
		return stateOf(t, s, run(job, 0)) == reconcile.StateReady
	})
	require.Equal(t, slurmrest.StatePending, getJob(t, job).State, "rotated while the job is pending")
	require.Equal(t, session.KeyID(old), sealedKeyID(t, s, run(job, 0)), "sealed under the key before the rotation")

	out, code := juiceSlurmKey(t, "rotate")
	require.Equal(t, 0, code, out)
	t.Cleanup(func() {
		if _, err := os.Stat(keyFile + session.PreviousSuffix); err == nil {
			out, code := juiceSlurmKey(t, "retire")
			require.Equal(t, 0, code, out)
		}
	})
	now, err := session.KeyFile(keyFile).All()
	require.NoError(t, err)
	require.Len(t, now, 2)
	require.Equal(t, old, now[1], "the old key is the previous one")
	require.Contains(t, out, "current "+session.KeyID(now[0])+", previous "+session.KeyID(old))

	j := waitJobDone(t, job, 90*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	b, err := os.ReadFile(outFile)
	require.NoError(t, err)
	r, err := s.ForRun(context.Background(), run(job, 0))
	require.NoError(t, err)
	require.Contains(t, string(b), "JUICE_SESSION_ID="+r.Status.SessionID+"\n", "the job ran with its session, sealed under the previous key")
	require.Contains(t, string(b), "JUICE_GPU_COUNT=1\n")

	// A job after the rotation: sealed under the new key, and it runs.
	outFile2 := filepath.Join(world.dir, "rotation2.out")
	job2 := sbatch(t, "--juice-pool=test", "-o", world.env.JobPath(outFile2), "--wrap", "sleep 3; srun env")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(job2)))
	waitFor(t, 60*time.Second, "the second job runs", func() bool { return getJob(t, job2).State == slurmrest.StateRunning })
	require.Equal(t, session.KeyID(now[0]), sealedKeyID(t, s, run(job2, 0)), "sealed under the new key")
	j = waitJobDone(t, job2, 90*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	b, err = os.ReadFile(outFile2)
	require.NoError(t, err)
	require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, string(b))

	out, code = juiceSlurmKey(t, "retire")
	require.Equal(t, 0, code, out)
	out, code = juiceSlurmKey(t, "show")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "previous  none")
	for _, id := range []uint32{job, job2} {
		waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(id, 0)) == reconcile.StateReleased })
		noLiveSession(t, s, id)
	}
}

// A session file left behind once its run is over (an epilog that never ran: put back here by hand) is removed
// by the controller's sweep, so that no later job with that id and run is handed it.
func TestStaleSessionFileIsSwept(t *testing.T) {
	s := openStore(t)
	dir := world.env.Get("JUICE_TESTBED_SESSIONS_DIR")
	job := sbatch(t, "--juice-pool=test", "-o", "/dev/null", "--wrap", "sleep 4")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(job)))
	path := filepath.Join(dir, fmt.Sprintf("%d.0.session", job))
	var saved []byte
	waitFor(t, 60*time.Second, "the job's session file", func() bool {
		b, err := os.ReadFile(path)
		saved = b
		return err == nil && len(b) > 0
	})
	fi, err := os.Stat(path)
	require.NoError(t, err)
	waitJobDone(t, job, 90*time.Second)
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	_, err = os.Stat(path)
	require.True(t, os.IsNotExist(err), "the epilog (or the controller) removed the file")

	// The file as a slurmctld that crashed before the epilog would have left it.
	require.NoError(t, os.WriteFile(path, saved, 0o600))
	st := fi.Sys().(*syscall.Stat_t)
	require.NoError(t, os.Chown(path, int(st.Uid), int(st.Gid)), "as the prolog wrote it: SlurmUser's")
	waitFor(t, 40*time.Second, "the sweep removes the stale file", func() bool {
		_, err := os.Stat(path)
		return os.IsNotExist(err)
	})
	log, err := os.ReadFile(world.ctlLog)
	require.NoError(t, err)
	require.True(t, strings.Contains(string(log), `"removed a stale session file"`) &&
		strings.Contains(string(log), fmt.Sprintf(`"file":"%d.0.session"`, job)), "the controller says it removed it")
	noLiveSession(t, s, job)
}
