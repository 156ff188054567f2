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

// With hand-off on, a job that ends while the same user's like job waits for the pool's license passes its session
// to that job as it starts: one session for both, never cancelled in between, and the sweep leaves it alone; the
// second job's end, with nobody after it, cancels it. The look-ahead leaves the like job to its hand-off.
func TestAHandedSessionServesTheNextLikeJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	// Another client holds one of the pool's two agents: the pool has room for one 4-GPU job.
	_, err := h.juice.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 4})
	require.NoError(t, err)
	const req = "juice:v1:pool=test,gpus=4"
	next := fakeslurm.JuiceJob(43, 0, slurmrest.StatePending, req)
	// Pending for its turn, yet not reserved ahead: job 42 runs alike, so job 43 is its heir (reconcile.Candidate.Heir)
	// and starts when job 42 gives the license back.
	next.StateReason = "Priority"
	h.slurm.Set(fakeslurm.JuiceJob(42, 0, slurmrest.StateConfiguring, req), next)
	c, _ := h.startController("a", Config{Policy: &policy.Policy{PoolLimits: map[string]*policy.PoolLimits{"test": {Handoff: true}}}})

	code, out := post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 42, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReady, out["outcome"], "%v", out)
	first, err := h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 42})
	require.NoError(t, err)
	sid := first.Status.SessionID
	lists := h.slurm.Lists()
	eventually(t, 10*time.Second, "a poll that sees job 43 pending", func() bool { return h.slurm.Lists() >= lists+2 })

	// Job 42 ends; Slurm starts job 43 with the license it gave back.
	done := fakeslurm.JuiceJob(42, 0, slurmrest.StateCompleted, req)
	h.slurm.Set(done, fakeslurm.JuiceJob(43, 0, slurmrest.StateConfiguring, req))
	code, out = post(t, c, "/v1/epilog", hookSecret, hookapi.EpilogRequest{Cluster: "c1", JobID: 42, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code, "%v", out)
	code, out = post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 43, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReady, out["outcome"], "%v", out)

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
	h.slurm.Set(fakeslurm.JuiceJob(43, 0, slurmrest.StateCompleted, req))
	code, out = post(t, c, "/v1/epilog", hookSecret, hookapi.EpilogRequest{Cluster: "c1", JobID: 43, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code, "%v", out)
	eventually(t, 10*time.Second, "job 43's session cancelled", func() bool { return len(h.liveSessions()) == 1 })
	require.NotEqual(t, sid, h.liveSessions()[0].ID)
}
