//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// setSimAgent sets an agent's state through juice-sim's admin API ("closed" ends its sessions, as a dead agent's).
func setSimAgent(t *testing.T, agent, state string) {
	t.Helper()
	require.NoError(t, world.simAdmin.SetAgent(context.Background(), agent, state))
}

// killAgentOf closes the juice-sim agent that holds a ready run's session, and brings it back when the test ends.
func killAgentOf(t *testing.T, s interface {
	ForRun(context.Context, reconcile.RunID) (reconcile.Reservation, error)
}, id reconcile.RunID) string {
	t.Helper()
	r, err := s.ForRun(context.Background(), id)
	require.NoError(t, err)
	require.NotEmpty(t, r.Status.AgentAddress)
	agent := strings.SplitN(r.Status.AgentAddress, ".", 2)[0] // juice-sim's agents are "<id>.sim:<port>"
	setSimAgent(t, agent, "closed")
	t.Cleanup(func() { setSimAgent(t, agent, "active") })
	return r.Status.SessionID
}

// A batch job whose session the Juice Controller closes under it (its agent died) is requeued, and its next run
// gets a new session; no job keeps running without the GPUs it asked for.
func TestLostSessionRequeuesBatchJob(t *testing.T) {
	s := openStore(t)
	job := sbatch(t, "--juice-pool=test", "-o", "/dev/null", "--wrap", "sleep 300")
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(job)))
	waitFor(t, 60*time.Second, "running with its session", func() bool {
		return getJob(t, job).State == slurmrest.StateRunning && stateOf(t, s, run(job, 0)) == reconcile.StateReady
	})
	old := killAgentOf(t, s, run(job, 0))

	waitFor(t, 90*time.Second, "run 0 failed and the job requeued", func() bool {
		return stateOf(t, s, run(job, 0)) == reconcile.StateFailed && getJob(t, job).Run >= 1
	})
	r0, err := s.ForRun(context.Background(), run(job, 0))
	require.NoError(t, err)
	require.Contains(t, r0.Status.FailReason, "closed", "the reservation says why")
	waitFor(t, 3*time.Minute, "run 1 runs with a new session", func() bool {
		j := getJob(t, job)
		return j.Run == 1 && j.State == slurmrest.StateRunning && stateOf(t, s, run(job, 1)) == reconcile.StateReady
	})
	r1, err := s.ForRun(context.Background(), run(job, 1))
	require.NoError(t, err)
	require.NotEqual(t, old, r1.Status.SessionID)
	require.Equal(t, 1, getJob(t, job).Run, "requeued once, not again")
	_, _ = sh(t, 10*time.Second, "scancel", strconv.Itoa(int(job)))
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 1)) == reconcile.StateReleased })
	noLiveSession(t, s, job)
}

// An interactive job whose session is closed under it is cancelled, and srun prints the `juice:` reason.
func TestLostSessionCancelsInteractiveJob(t *testing.T) {
	s := openStore(t)
	name := fmt.Sprintf("e2e-lost-%d", time.Now().UnixNano()%1e6)
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		out, code := sh(t, 4*time.Minute, "srun", "--job-name="+name, "--juice-pool=test", "sleep", "200")
		done <- result{out, code}
	}()
	var job uint32
	waitFor(t, 60*time.Second, "srun's job runs with its session", func() bool {
		q, _ := sh(t, 10*time.Second, "squeue", "-h", "-n", name, "-o", "%i")
		id, err := strconv.ParseUint(strings.TrimSpace(q), 10, 32)
		if err != nil {
			return false
		}
		job = uint32(id)
		return getJob(t, job).State == slurmrest.StateRunning && stateOf(t, s, run(job, 0)) == reconcile.StateReady
	})
	defer sh(t, 10*time.Second, "scancel", strconv.Itoa(int(job)))
	killAgentOf(t, s, run(job, 0))

	var res result
	select {
	case res = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("srun still runs two minutes after its session was lost")
	}
	require.NotEqual(t, 0, res.code, res.out)
	require.Regexp(t, `(?m)^srun: juice: the job's GPUs are gone: .*; the job is cancelled$`, res.out)
	j := waitJobDone(t, job, 30*time.Second)
	require.Equal(t, slurmrest.StateCancelled, j.State)
	require.Equal(t, 0, j.Run)
	noLiveSession(t, s, job)
}
