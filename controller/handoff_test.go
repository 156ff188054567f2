package controller

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/controller/juiceport"
	"github.com/juice-slurm/juice-slurm/controller/sweep"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
)

// handoffReq is what the hand-off tests' jobs ask: a whole agent of pool test.
const handoffReq = "juice:v1:pool=test,gpus=4"

// handoffPool starts a controller with hand-off on in pool test, Slurm showing jobs, and another Juice client
// holding one of the pool's two agents: the pool has room for one job asking handoffReq.
func handoffPool(t *testing.T, jobs ...slurmrest.Job) (*harness, *Controller) {
	h := newHarness(t)
	_, err := h.juice.RequestSession(context.Background(), uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 4})
	require.NoError(t, err)
	h.slurm.Set(jobs...)
	c, _ := h.startController("a", Config{Policy: &policy.Policy{PoolLimits: map[string]*policy.PoolLimits{"test": {Handoff: true}}}})
	return h, c
}

// endAndStartNext has job 42 end (its epilog) and Slurm start job 43, whose prolog must find its session ready.
func endAndStartNext(t *testing.T, h *harness, c *Controller) {
	t.Helper()
	h.slurm.Set(fakeslurm.JuiceJob(42, 0, slurmrest.StateCompleted, handoffReq), fakeslurm.JuiceJob(43, 0, slurmrest.StateConfiguring, handoffReq))
	code, out := post(t, c, "/v1/epilog", hookSecret, hookapi.EpilogRequest{Cluster: "c1", JobID: 42, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code, "%v", out)
	code, out = post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 43, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReady, out["outcome"], "%v", out)
}

// With hand-off on, a job that ends while the same user's like job waits for the pool's license passes its session
// to that job as it starts: one session for both, never cancelled in between, and the sweep leaves it alone; the
// second job's end, with nobody after it, cancels it. The look-ahead leaves the like job to its hand-off.
func TestAHandedSessionServesTheNextLikeJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	next := fakeslurm.JuiceJob(43, 0, slurmrest.StatePending, handoffReq)
	// Pending for its turn, yet not reserved ahead: job 42 runs alike, so job 43 is its heir (reconcile.Candidate.Heir)
	// and starts when job 42 gives the license back.
	next.StateReason = "Priority"
	h, c := handoffPool(t, fakeslurm.JuiceJob(42, 0, slurmrest.StateConfiguring, handoffReq), next)

	code, out := post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 42, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReady, out["outcome"], "%v", out)
	first, err := h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 42})
	require.NoError(t, err)
	sid := first.Status.SessionID
	lists := h.slurm.Lists()
	eventually(t, 10*time.Second, "a poll that sees job 43 pending", func() bool { return h.slurm.Lists() >= lists+2 })

	// Job 42 ends; Slurm starts job 43 with the license it gave back.
	endAndStartNext(t, h, c)

	second, err := h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 43})
	require.NoError(t, err)
	require.Equal(t, sid, second.Status.SessionID, "job 43 runs on job 42's session")
	require.False(t, second.Status.Requested, "nothing was asked of the Juice Controller for job 43")
	first, err = h.store.Get(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.StateReleased, first.Status.State)
	evs, err := h.store.Events(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.EventHanded, evs[len(evs)-1].Event)
	require.Len(t, h.liveSessions(), 2, "the other client's and the one handed on: no third")
	// Counted once the transaction committed, just after what the prolog saw.
	eventually(t, 5*time.Second, "juice_slurm_handoffs_total 1", func() bool { return counted(t, c.Metrics.handoffs) == 1 })
	n, err := sweep.Sessions(ctx, h.store, juiceport.New(h.juice), h.log)
	require.NoError(t, err)
	require.Zero(t, n, "the sweep takes the handed session for the live run's, not an orphan of job 42's key")
	require.Len(t, h.liveSessions(), 2)

	// Job 43 ends, nobody after it: its session is cancelled.
	h.slurm.Set(fakeslurm.JuiceJob(43, 0, slurmrest.StateCompleted, handoffReq))
	code, out = post(t, c, "/v1/epilog", hookSecret, hookapi.EpilogRequest{Cluster: "c1", JobID: 43, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code, "%v", out)
	eventually(t, 10*time.Second, "job 43's session cancelled", func() bool { return len(h.liveSessions()) == 1 })
	require.NotEqual(t, sid, h.liveSessions()[0].ID)
}

// A like job whose prolog came before the end of the job whose license it got asked for a session of its own, which
// waits in the Juice queue (the pool is full): when that job ends, its session passes to the waiting run, whose own
// queued session is cancelled at the Juice Controller. No third session, and the run becomes ready without waiting
// for GPUs.
func TestAHandedSessionServesALikeJobWaitingInTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, c := handoffPool(t, fakeslurm.JuiceJob(42, 0, slurmrest.StateConfiguring, handoffReq))
	code, out := post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 42, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReady, out["outcome"], "%v", out)
	first, err := h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 42})
	require.NoError(t, err)

	// Job 43 starts while job 42 still runs (as far as the controller knows): it asks, and its session queues.
	h.slurm.Set(fakeslurm.JuiceJob(42, 0, slurmrest.StateRunning, handoffReq), fakeslurm.JuiceJob(43, 0, slurmrest.StateConfiguring, handoffReq))
	var own string
	eventually(t, 10*time.Second, "job 43 waits with its own session queued", func() bool {
		r, err := h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 43})
		own = r.Status.SessionID
		return err == nil && r.Status.State == reconcile.StateWaiting && own != "" && r.Spec.JobState == "CONFIGURING"
	})

	endAndStartNext(t, h, c)
	second, err := h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 43})
	require.NoError(t, err)
	require.Equal(t, first.Status.SessionID, second.Status.SessionID, "job 43 runs on job 42's session")
	eventually(t, 5*time.Second, "job 43's own queued session cancelled", func() bool {
		for _, s := range h.sim.Sim.Sessions() {
			if s.ID == own {
				return s.Ended() && s.Address == ""
			}
		}
		return false
	})
	require.Len(t, h.liveSessions(), 2, "the other client's and the one handed on: no third")
}
