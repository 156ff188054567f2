package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
)

// F2: a job over the site's limits (here one whose admin_comment was written before the limit was lowered, or
// around job_submit.lua) fails at once with the limit it breaks: nothing is asked of the Juice Controller, the
// prolog hears "failed" on its first call, and the run is never reserved again.
func TestRequestOverThePolicyFailsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	limits, err := policy.Parse("max_gpus = 2\nmax_vram = 24GiB\npools = test\n")
	require.NoError(t, err)
	h.slurm.Set(fakeslurm.JuiceJob(70, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=4"),
		fakeslurm.JuiceJob(71, 0, slurmrest.StatePending, "juice:v1:pool=other,gpus=1"),
		fakeslurm.JuiceJob(72, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=1,vram=25769803777"),
		fakeslurm.JuiceJob(73, 0, slurmrest.StatePending, "juice:v1:pool=test,gpus=2"))
	c, _ := h.startController("a", Config{Policy: limits})
	runOf := func(job uint32) reconcile.RunID { return reconcile.RunID{Cluster: "c1", JobID: job} }
	eventually(t, 10*time.Second, "the three over the limits failed, the one within is ready", func() bool {
		return h.stateOf(runOf(70)) == reconcile.StateFailed && h.stateOf(runOf(71)) == reconcile.StateFailed &&
			h.stateOf(runOf(72)) == reconcile.StateFailed && h.stateOf(runOf(73)) == reconcile.StateReady
	})
	for job, want := range map[uint32]string{70: "4 GPUs asked for, at most 2", 71: `pool "other" is not one of the site's pools`,
		72: "at most 24GiB allowed"} {
		r, err := h.store.ForRun(context.Background(), runOf(job))
		require.NoError(t, err)
		require.Contains(t, r.Status.FailReason, "refused by the site policy")
		require.Contains(t, r.Status.FailReason, want)
		require.False(t, r.Status.Requested, "job %d: nothing was asked of the Juice Controller", job)
	}
	require.Len(t, h.liveSessions(), 1, "only the job within the limits has a session")
	start := time.Now()
	code, out := post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 70, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeFailed, out["outcome"], "%v", out)
	require.Contains(t, out["reason"], "at most 2 allowed per job")
	require.Less(t, time.Since(start), 5*time.Second, "the prolog is not kept waiting")
	rs, err := h.store.ForJob(context.Background(), 70)
	require.NoError(t, err)
	require.Len(t, rs, 1, "the refused run is not reserved again")
}

// refusingJuice is a Juice client whose own bounds are narrower than the request grammar's (a client of another
// version, say): it refuses every request before sending it, as HTTPClient refuses more than 1024 GPUs.
type refusingJuice struct{ juiceapi.Client }

func (refusingJuice) RequestSession(context.Context, uuid.UUID, juiceapi.SessionRequest) (string, error) {
	return "", fmt.Errorf("request session: %w", &juiceapi.APIError{Method: http.MethodPost, Path: "/v1/request/session",
		Kind: juiceapi.ErrInvalidRequest, Err: errors.New("GPU count 4: too many")})
}

// F3: a request the Juice client refuses to send is permanent: the reservation fails and leaves releasing at
// once, where the first version took the refusal for an outage and asked again for ever.
func TestRequestTheClientRefusesNeverStaysInReleasing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 80}, request.Request{Pool: "test", GPUs: 4})
	got := h.driveTo(h.reconciler(refusingJuice{h.juice}), r.ID, reconcile.StateFailed)
	require.Contains(t, got.Status.FailReason, "the Juice client refuses 4 GPUs from pool test")
	require.Empty(t, h.liveSessions())
	// HTTPClient's own refusal is of that kind.
	_, err := h.juice.RequestSession(context.Background(), r.ID, juiceapi.SessionRequest{PoolID: "test", GPUs: 2000})
	require.ErrorIs(t, err, juiceapi.ErrInvalidRequest)
}

// F13: a pool name a user typed becomes no label of its own: with the site policy's pool list only its pools are
// labelled and every other counts as "other"; without one, the first 64 pools seen are, and the rest are "other".
func TestPoolLabelsOnlyForKnownPools(t *testing.T) {
	m := NewMetrics(nil)
	c := &stateCollector{m: m, pools: map[string]bool{}}
	for i := 0; i < 100; i++ {
		c.pools[c.label(fmt.Sprintf("typed-%d", i))] = true
	}
	require.Len(t, c.pools, maxPoolLabels+1, "64 pools and other")
	require.True(t, c.pools["other"])

	limits, err := policy.Parse("pools = test\n")
	require.NoError(t, err)
	m.SetPolicy(limits)
	c = &stateCollector{m: m, pools: map[string]bool{}}
	require.Equal(t, "test", c.label("test"))
	require.Equal(t, "other", c.label("x-user-typed-this"))
	require.Equal(t, "other", c.label("typed-0"))
}
