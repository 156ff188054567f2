package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
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

// Issue 13 item 8: a pool's own limits. A job of an account or partition the pool does not admit fails at once
// naming it, as one over the pool's per-job limit does; a run that would take its user over the pool's
// max_gpus_per_user waits, pending, saying why (describe and jobs show the reason), and is served once the
// user's other run lets its GPUs go. Another user's run is not held back by it.
func TestPoolLimitsRefuseOrKeepWaiting(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	limits, err := policy.Parse("pools = test\npool.test.accounts = physics, ml\npool.test.partitions = debug\n" +
		"pool.test.max_gpus = 3\npool.test.max_gpus_per_user = 3\n")
	require.NoError(t, err)
	job := func(id uint32, user, account, partition, req string) slurmrest.Job {
		j := fakeslurm.JuiceJob(id, 0, slurmrest.StateRunning, req)
		j.UserName, j.Account, j.Partition = user, account, partition
		return j
	}
	h.slurm.Set(job(90, "alice", "physics", "debug", "juice:v1:pool=test,gpus=2"),
		job(92, "bob", "ml", "debug", "juice:v1:pool=test,gpus=3"),
		job(93, "alice", "chem", "debug", "juice:v1:pool=test,gpus=1"),
		job(94, "alice", "physics", "batch", "juice:v1:pool=test,gpus=1"),
		job(95, "carol", "physics", "debug", "juice:v1:pool=test,gpus=4"))
	h.startController("a", Config{Policy: limits})
	runOf := func(job uint32) reconcile.RunID { return reconcile.RunID{Cluster: "c1", JobID: job} }
	eventually(t, 10*time.Second, "alice's first run and bob's are ready, the three over a limit failed", func() bool {
		return h.stateOf(runOf(90)) == reconcile.StateReady && h.stateOf(runOf(92)) == reconcile.StateReady &&
			h.stateOf(runOf(93)) == reconcile.StateFailed && h.stateOf(runOf(94)) == reconcile.StateFailed &&
			h.stateOf(runOf(95)) == reconcile.StateFailed
	})
	for job, want := range map[uint32]string{93: `jobs of account "chem" may not use pool "test" (its accounts: ml, physics)`,
		94: `jobs of partition "batch" may not use pool "test"`, 95: `4 GPUs asked for, at most 3 allowed per job in pool "test"`} {
		r, err := h.store.ForRun(context.Background(), runOf(job))
		require.NoError(t, err)
		require.Contains(t, r.Status.FailReason, want, "job %d", job)
		require.False(t, r.Status.Requested, "job %d: nothing was asked of the Juice Controller", job)
	}
	r90, err := h.store.ForRun(context.Background(), runOf(90))
	require.NoError(t, err)
	require.Equal(t, "physics", r90.Account, "the run's account is recorded")

	// Alice holds 2 of her 3: a run of 2 more waits, and says why.
	h.slurm.Set(job(91, "alice", "physics", "debug", "juice:v1:pool=test,gpus=2"))
	const why = "waiting for user alice's GPUs in pool test: 2 held or being got, 2 more asked for, at most 3 at once"
	eventually(t, 10*time.Second, "alice's second run waits", func() bool {
		r, err := h.store.ForRun(context.Background(), runOf(91))
		return err == nil && r.Status.State == reconcile.StatePending && strings.Contains(r.Status.Reason, why)
	})
	// It keeps waiting (the reconciler looks again every WaitPoll) and says so once in its history.
	time.Sleep(300 * time.Millisecond)
	r91, err := h.store.ForRun(context.Background(), runOf(91))
	require.NoError(t, err)
	require.Equal(t, reconcile.StatePending, r91.Status.State)
	require.False(t, r91.Status.Requested)
	events, err := h.store.Events(context.Background(), r91.ID)
	require.NoError(t, err)
	waits := 0
	for _, e := range events {
		if e.Event == reconcile.EventWait {
			waits++
		}
	}
	require.Equal(t, 1, waits, "the wait is recorded once: %v", events)
	// The job's comment says why, where squeue %k and scontrol show it.
	comment := func() string {
		j, err := h.slurm.GetJob(context.Background(), 91)
		require.NoError(t, err)
		return j.Comment
	}
	eventually(t, 10*time.Second, "the job's comment says why its run waits", func() bool {
		return strings.HasPrefix(comment(), "juice: "+why)
	})

	// Alice's first job ends: her second run is served.
	ended := job(90, "alice", "physics", "debug", "juice:v1:pool=test,gpus=2")
	ended.State = slurmrest.StateCompleted
	h.slurm.Set(ended)
	eventually(t, 15*time.Second, "alice's second run is ready once her first let its GPUs go", func() bool {
		return h.stateOf(runOf(91)) == reconcile.StateReady
	})
	eventually(t, 10*time.Second, "the job's comment holds its request again", func() bool {
		return comment() == "juice:v1:pool=test,gpus=2"
	})
	held, err := h.store.HeldGPUs(context.Background(), "test", "alice")
	require.NoError(t, err)
	require.Equal(t, 2, held)
}

// Runs of one user that arrive together never pass the cap together: the reconcile workers count and request
// one at a time, so of alice's six 1-GPU runs with a cap of 2, two are served and four wait; when one of hers
// ends, exactly one more is served.
func TestUserCapHoldsWhenRunsArriveTogether(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	limits, err := policy.Parse("pool.test.max_gpus_per_user = 2\n")
	require.NoError(t, err)
	h.slurm.SetRunning(100, 6, "juice:v1:pool=test,gpus=1")
	h.startController("a", Config{Policy: limits, Workers: 8})
	count := func() (ready, waiting int) {
		for job := uint32(100); job < 106; job++ {
			r, err := h.store.ForRun(context.Background(), reconcile.RunID{Cluster: "c1", JobID: job})
			if err != nil {
				continue
			}
			switch {
			case r.Status.State == reconcile.StateReady:
				ready++
			case r.Status.State == reconcile.StatePending && policy.IsWait(r.Status.Reason):
				waiting++
			}
		}
		return ready, waiting
	}
	eventually(t, 10*time.Second, "two of alice's runs served, four waiting", func() bool {
		ready, waiting := count()
		return ready == 2 && waiting == 4
	})
	require.Len(t, h.liveSessions(), 2, "never more sessions than the cap")
	held, err := h.store.HeldGPUs(context.Background(), "test", "alice")
	require.NoError(t, err)
	require.Equal(t, 2, held)

	var served uint32
	for job := uint32(100); job < 106; job++ {
		if h.stateOf(reconcile.RunID{Cluster: "c1", JobID: job}) == reconcile.StateReady {
			served = job
			break
		}
	}
	ended := fakeslurm.JuiceJob(served, 0, slurmrest.StateCompleted, "juice:v1:pool=test,gpus=1")
	h.slurm.Set(ended)
	eventually(t, 15*time.Second, "one more served once one of hers ended", func() bool {
		ready, waiting := count()
		return ready == 2 && waiting == 3 && h.stateOf(reconcile.RunID{Cluster: "c1", JobID: served}) == reconcile.StateReleased
	})
	require.Len(t, h.liveSessions(), 2)
}
