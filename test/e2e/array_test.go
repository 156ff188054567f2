//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// An array larger than the pool: 12 elements of 2 GPUs each through pool "test" (8 GPUs), at most 2 running at
// once (%2). Every element gets a session of its own and completes; the pending remainder never gets a
// reservation; the elements are reserved ahead by element, before slurmctld gives them a job id, so that from the
// fifth on each one's session was already ready when its job appeared (its reservation's history: created by the
// poller from the remainder, and ready when bound to the job); none is left open or leaked (also the suite's leak
// check).
func TestArrayLargerThanThePool(t *testing.T) {
	s := openStore(t)
	const n = 12
	out := filepath.Join(world.dir, "array-%a.out")
	array := sbatch(t, fmt.Sprintf("--array=0-%d%%2", n-1), "--juice-pool=test", "--juice-gpu-count=2",
		"-o", world.env.JobPath(out), "--wrap", "env; sleep 3")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(array)))

	// Every element ended: slurmctld lists n records of the array, each with its task id, all finished.
	elements := waitArrayDone(t, array, n, 300*time.Second)
	for task, j := range elements {
		require.Equal(t, slurmrest.StateCompleted, j.State, "element %d_%d (job %d)", array, task, j.ID)
		b, err := os.ReadFile(strings.ReplaceAll(out, "%a", strconv.Itoa(int(task))))
		require.NoError(t, err)
		require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, string(b), "element %d had its session", task)
		require.Regexp(t, `(?m)^JUICE_GPU_COUNT=2$`, string(b), "element %d", task)
	}

	waitFor(t, 60*time.Second, "every element's reservation released", func() bool {
		rs, err := s.ForArray(context.Background(), array)
		require.NoError(t, err)
		for _, r := range rs {
			if !r.Status.State.Final() {
				return false
			}
		}
		return len(rs) >= n
	})
	rs, err := s.ForArray(context.Background(), array)
	require.NoError(t, err)
	sessions := map[string]uint32{}
	var ahead []uint32
	for _, r := range rs {
		task := r.Run.ArrayTaskID
		j := elements[task]
		require.Equal(t, reconcile.RunID{Cluster: world.env.Cluster(), JobID: j.ID, ArrayJobID: array, ArrayTaskID: task},
			r.Run, "one reservation per element, bound to its job")
		require.Equal(t, reconcile.StateReleased, r.Status.State, "%s: %s", r.Run, r.Status.FailReason)
		require.NotEmpty(t, r.Status.SessionID, "%s had a session", r.Run)
		if other, dup := sessions[r.Status.SessionID]; dup {
			t.Fatalf("elements %d and %d shared session %s", other, task, r.Status.SessionID)
		}
		sessions[r.Status.SessionID] = task
		evs, err := s.Events(context.Background(), r.ID)
		require.NoError(t, err)
		if strings.HasPrefix(evs[0].Reason, fmt.Sprintf("array element %d_%d ", array, task)) && readyWhenBound(evs) {
			ahead = append(ahead, task)
		}
		noLiveSession(t, s, j.ID)
	}
	require.Len(t, rs, n, "one reservation per element, none for the pending remainder")
	rs, err = s.ForJob(context.Background(), array)
	require.NoError(t, err)
	for _, r := range rs {
		require.True(t, r.Run.Element(), "job %d's only reservation is its last element's, never the remainder's: %s", array, r.Run)
	}
	t.Logf("array %d: elements whose session was ready before slurmctld gave them a job id: %v", array, ahead)
	for task := uint32(4); task < n; task++ {
		require.Contains(t, ahead, task, "element %d was reserved ahead and ready when it started", task)
	}
}

// readyWhenBound reports whether the reservation was ready when it was bound to its element's job.
func readyWhenBound(evs []reconcile.Transition) bool {
	for _, e := range evs {
		if e.Event == reconcile.EventBound && e.From == reconcile.StateReady {
			return true
		}
	}
	return false
}
