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
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// Pool demo has hand-off on in the suite's policy (runAll) and one agent of 4 GPUs: its license lets one 4-GPU job
// run at a time.
const handoffPool = "--juice-pool=demo"

// An array whose elements follow each other through the pool's license passes a session from element to element:
// at least one element runs on the session of the one before it, without a new one asked for, and the session
// file each element's tasks opened is the one sealed for it (the plugin opens no other). Nothing is leaked.
func TestHandoffPassesTheSessionAlongAnArray(t *testing.T) {
	s := openStore(t)
	const n = 4
	out := filepath.Join(world.dir, "handoff-%a.out")
	array := sbatch(t, "--array=0-"+strconv.Itoa(n-1), handoffPool, "--juice-gpu-count=4", "-o", world.env.JobPath(out),
		"--wrap", "printenv JUICE_SESSION_ID; sleep 2")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(array)))
	elements := waitArrayDone(t, array, n, 240*time.Second)

	// An element may have had two reservations: one reserved ahead that let the pool go to a started element and
	// a new one (reconcile.MustYield). Its tasks ran on the session of the one made ready last.
	rs := finalReservations(t, s, array, n)
	used := map[uint32]reconcile.Reservation{}
	taken, handed := 0, 0
	for _, r := range rs {
		evs := events(t, s, r)
		var hist []string
		for _, e := range evs {
			hist = append(hist, fmt.Sprintf("%s %s>%s:%s", e.At.Format("15:04:05.000"), e.From, e.To, e.Event))
		}
		j := elements[r.Run.ArrayTaskID]
		t.Logf("element %d (job %d, started %s, ended %s): %s", r.Run.ArrayTaskID, j.ID, j.StartTime.Format("15:04:05"),
			j.EndTime.Format("15:04:05"), strings.Join(hist, ", "))
		if hasEvent(evs, reconcile.EventTaken) {
			taken++
			require.False(t, r.Status.Requested, "%s took a session: it asked for none", r.Run)
		}
		if hasEvent(evs, reconcile.EventHanded) {
			handed++
		}
		if u, ok := used[r.Run.ArrayTaskID]; !ok || r.Status.ReadyAt.After(u.Status.ReadyAt) {
			used[r.Run.ArrayTaskID] = r
		}
	}
	require.Len(t, used, n, "every element had a reservation")
	sessions := map[string]bool{}
	for task, r := range used {
		j := elements[task]
		require.Equal(t, slurmrest.StateCompleted, j.State, "element %d (job %d)", task, j.ID)
		b, err := os.ReadFile(strings.ReplaceAll(out, "%a", strconv.Itoa(int(task))))
		require.NoError(t, err)
		require.Equal(t, r.Status.SessionID, strings.TrimSpace(string(b)), "element %d's tasks ran on its reservation's session", task)
		sessions[r.Status.SessionID] = true
		noLiveSession(t, s, j.ID)
	}
	t.Logf("array %d: %d elements, %d sessions, %d taken from the element before", array, n, len(sessions), taken)
	require.Positive(t, taken, "at least one element ran on the session of the one before it")
	require.Equal(t, taken, handed, "each session taken was handed by the run that ended")
	require.Less(t, len(sessions), n, "fewer sessions than elements")
}

// A session never passes to another user's job, nor to a job of another account, even while it waits for a like
// job (the same user's, pending behind them): each of those gets a session of its own. The controller runs without
// look-ahead here, so that no job is reserved ahead while pending: each is a run waiting for a session when it
// starts, as a taker is (with look-ahead the jobs behind would have asked for sessions of their own already, and
// none could be handed one).
func TestHandoffNeverCrossesUsersOrAccounts(t *testing.T) {
	s := openStore(t)
	restartController(t, "--lookahead-per-pool=0", "--lookahead-window=0")
	first := sbatch(t, handoffPool, "--juice-gpu-count=4", "-o", "/dev/null", "--wrap", "sleep 3")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(first)))
	waitFor(t, 60*time.Second, fmt.Sprintf("job %d running", first), func() bool { return getJob(t, first).State == slurmrest.StateRunning })
	// Behind it, for the pool's license: another user's job of the same account (root's default, as theirs), root's job
	// of another account, and root's like job (which makes the first one's session wait for a run at its end).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	user := world.env.OtherUser()
	cmd := world.env.CommandAs(ctx, user, "sbatch", "--parsable", handoffPool, "--juice-gpu-count=4", "-o", "/dev/null",
		"--chdir=/tmp", "--wrap", "true")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "sbatch as %s: %s", user, b)
	other, err := strconv.ParseUint(strings.TrimSpace(strings.Split(string(b), ";")[0]), 10, 32)
	require.NoError(t, err, "%s", b)
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(other)))
	account := sbatch(t, handoffPool, "--juice-gpu-count=4", "--account=chem", "-o", "/dev/null", "--wrap", "true")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(account)))
	like := sbatch(t, handoffPool, "--juice-gpu-count=4", "-o", "/dev/null", "--wrap", "true")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(like)))

	ids := []uint32{first, uint32(other), account, like}
	for _, id := range ids {
		require.Equal(t, slurmrest.StateCompleted, waitJobDone(t, id, 180*time.Second).State, "job %d", id)
	}
	rs := map[uint32]reconcile.Reservation{}
	for _, id := range ids {
		waitFor(t, 60*time.Second, fmt.Sprintf("job %d's reservation final", id), func() bool {
			r, err := s.ForRun(context.Background(), run(id, 0))
			rs[id] = r
			return err == nil && r.Status.State.Final()
		})
		require.Equal(t, reconcile.StateReleased, rs[id].Status.State, "job %d: %s", id, rs[id].Status.FailReason)
		noLiveSession(t, s, id)
	}
	for _, id := range []uint32{uint32(other), account} {
		require.False(t, hasEvent(events(t, s, rs[id]), reconcile.EventTaken), "job %d took another's session", id)
		require.NotEqual(t, rs[first].Status.SessionID, rs[id].Status.SessionID, "job %d got job %d's session", id, first)
		require.True(t, rs[id].Status.Requested, "job %d asked for a session of its own", id)
	}
	require.NotEqual(t, rs[uint32(other)].Status.SessionID, rs[account].Status.SessionID)
	t.Logf("sessions: first %s, another user's %s, account chem's %s, like %s (taken: %v)", rs[first].Status.SessionID,
		rs[uint32(other)].Status.SessionID, rs[account].Status.SessionID, rs[like].Status.SessionID,
		hasEvent(events(t, s, rs[like]), reconcile.EventTaken))
}

// waitArrayDone waits for array's n elements to finish and returns them by task id.
func waitArrayDone(t *testing.T, array uint32, n int, within time.Duration) map[uint32]slurmrest.Job {
	t.Helper()
	var elements map[uint32]slurmrest.Job
	waitFor(t, within, fmt.Sprintf("array %d's %d elements end", array, n), func() bool {
		list, err := world.slurm.ListJobs(context.Background(), time.Time{})
		require.NoError(t, err)
		elements = map[uint32]slurmrest.Job{}
		for _, j := range list.Jobs {
			if j.Array == nil || j.Array.JobID != array {
				continue
			}
			if !j.Array.HasTask || !j.State.IsFinished() {
				return false
			}
			elements[j.Array.TaskID] = j
		}
		return len(elements) == n
	})
	return elements
}

// finalReservations waits for array's n reservations to be final and returns them.
func finalReservations(t *testing.T, s *store.Store, array uint32, n int) []reconcile.Reservation {
	t.Helper()
	var rs []reconcile.Reservation
	waitFor(t, 60*time.Second, "every element's reservations final", func() bool {
		var err error
		rs, err = s.ForArray(context.Background(), array)
		require.NoError(t, err)
		for _, r := range rs {
			if !r.Status.State.Final() {
				return false
			}
		}
		return len(rs) >= n
	})
	require.GreaterOrEqual(t, len(rs), n, "a reservation per element at least")
	for _, r := range rs {
		require.Equal(t, reconcile.StateReleased, r.Status.State, "%s: %s", r.Run, r.Status.FailReason)
	}
	return rs
}

func events(t *testing.T, s *store.Store, r reconcile.Reservation) []reconcile.Transition {
	t.Helper()
	evs, err := s.Events(context.Background(), r.ID)
	require.NoError(t, err)
	return evs
}

func hasEvent(evs []reconcile.Transition, ev reconcile.Event) bool {
	for _, e := range evs {
		if e.Event == ev {
			return true
		}
	}
	return false
}

// restartController restarts the controller with extra flags, and with the suite's own at the test's end.
func restartController(t *testing.T, extra ...string) {
	t.Helper()
	stop := func() {
		testbed.StopProcess(world.controller)
	}
	stop()
	require.NoError(t, startControllerOn(world.dbURL, extra...))
	t.Cleanup(func() {
		stop()
		require.NoError(t, startController())
	})
}
