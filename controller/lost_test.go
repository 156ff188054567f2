package controller

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
)

// recordingEnder records what the job actor asks, and plays Slurm's part: a requeued job gets its next run, a
// cancelled one ends.
type recordingEnder struct {
	slurm *fakeslurm.Slurm
	mu    sync.Mutex
	calls []string
}

func (e *recordingEnder) record(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, s)
}

func (e *recordingEnder) Calls() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...)
}

func (e *recordingEnder) Requeue(ctx context.Context, job uint32) error {
	e.record("requeue " + itoa(job))
	j, err := e.slurm.GetJob(ctx, job)
	if err != nil {
		return err
	}
	j.Run++
	j.State, j.StateReason = slurmrest.StatePending, "BeginTime"
	e.slurm.Set(*j)
	return nil
}

func (e *recordingEnder) Cancel(ctx context.Context, job uint32) error {
	e.record("cancel " + itoa(job))
	j, err := e.slurm.GetJob(ctx, job)
	if err != nil {
		return err
	}
	j.State = slurmrest.StateCancelled
	e.slurm.Set(*j)
	return nil
}

func (e *recordingEnder) Notify(_ context.Context, job uint32, msg string) error {
	e.record("notify " + itoa(job) + " " + msg)
	return nil
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// When the Juice Controller closes the sessions under running jobs (their agents died), the batch job is
// requeued and the interactive one cancelled, each once, after its user is told why; the batch job's comment
// (job_submit.lua's copy of the request) says why too.
func TestLostSessionRequeuesBatchCancelsInteractive(t *testing.T) {
	h := newHarness(t)
	ender := &recordingEnder{slurm: h.slurm}
	req := "juice:v1:pool=test,gpus=1"
	batch := fakeslurm.JuiceJob(71, 0, slurmrest.StateRunning, req)
	interactive := fakeslurm.JuiceJob(72, 0, slurmrest.StateRunning, req)
	interactive.Batch = false
	h.slurm.Set(batch, interactive)
	h.startControllerOf(h.store, h.slurm, "a", Config{ReadyCheck: 200 * time.Millisecond}, func(c *Controller) { c.Ender = ender })
	b0, i0 := reconcile.RunID{Cluster: "c1", JobID: 71}, reconcile.RunID{Cluster: "c1", JobID: 72}
	eventually(t, 10*time.Second, "both runs ready", func() bool {
		return h.stateOf(b0) == reconcile.StateReady && h.stateOf(i0) == reconcile.StateReady
	})
	require.Empty(t, ender.Calls(), "nothing is asked of jobs that have their sessions")

	poolID, _ := h.sim.Sim.PoolID("test")
	for _, a := range h.sim.Sim.Agents(poolID) {
		require.NoError(t, h.sim.Sim.SetAgentState(a.ID, "closed"))
	}
	eventually(t, 10*time.Second, "the batch job requeued and the interactive one cancelled", func() bool {
		var requeued, cancelled bool
		for _, c := range ender.Calls() {
			requeued = requeued || c == "requeue 71"
			cancelled = cancelled || c == "cancel 72"
		}
		return requeued && cancelled
	})
	require.Equal(t, reconcile.StateFailed, h.stateOf(b0))
	require.Equal(t, reconcile.StateFailed, h.stateOf(i0))
	var notified []string
	counts := map[string]int{}
	for _, c := range ender.Calls() {
		counts[strings.SplitN(c, " ", 3)[0]+" "+strings.SplitN(c, " ", 3)[1]]++
		if strings.HasPrefix(c, "notify ") {
			notified = append(notified, c)
		}
	}
	require.Equal(t, 1, counts["requeue 71"])
	require.Equal(t, 1, counts["cancel 72"])
	require.Len(t, notified, 2)
	for _, n := range notified {
		require.Contains(t, n, "juice: the job's GPUs are gone: ")
	}
	var comments []string
	for _, u := range h.slurm.Updates() {
		if u.Comment != nil {
			comments = append(comments, *u.Comment)
		}
	}
	require.Len(t, comments, 2, "both comments were job_submit.lua's copies of the request")
	require.Contains(t, strings.Join(comments, "\n"), "; the job is requeued for a new session")
	require.Contains(t, strings.Join(comments, "\n"), "; the job is cancelled")
}

// passes is how many reconcile passes c's leader has run.
func passes(t *testing.T, c *Controller) uint64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Metrics.reconcileDuration.Write(&m))
	return m.GetHistogram().GetSampleCount()
}

// Ready runs of a quiet cluster cost no reconcile pass: the liveness watch walks their pool once per ReadyCheck
// and hands the reconciler only a run whose session is gone (then failed under its job, which is requeued). The
// resync passes over steady runs too. (With a pass per run per ReadyCheck and per resync, 10,000 ready runs cost
// 610 passes a second.)
func TestQuietReadyRunsCostNoPasses(t *testing.T) {
	h := newHarness(t)
	req := "juice:v1:pool=test,gpus=1"
	for job := uint32(81); job <= 84; job++ {
		h.slurm.Set(fakeslurm.JuiceJob(job, 0, slurmrest.StateRunning, req))
	}
	c, _ := h.startControllerOf(h.store, h.slurm, "a", Config{ReadyCheck: 100 * time.Millisecond, Resync: 100 * time.Millisecond}, nil)
	eventually(t, 10*time.Second, "the runs ready", func() bool {
		for job := uint32(81); job <= 84; job++ {
			if h.stateOf(reconcile.RunID{Cluster: "c1", JobID: job}) != reconcile.StateReady {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // the passes of the burst drain
	before := passes(t, c)
	time.Sleep(time.Second) // ten ready checks and ten resyncs
	require.Equal(t, before, passes(t, c), "passes over ready runs while nothing changed")

	// One session ends at the Juice Controller: its run, and only it, is looked at and fails.
	r, err := h.store.LiveRun(context.Background(), reconcile.RunID{Cluster: "c1", JobID: 82})
	require.NoError(t, err)
	require.NoError(t, h.sim.Sim.Cancel(r.Status.SessionID))
	eventually(t, 10*time.Second, "the run whose session ended failed", func() bool {
		return h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 82}) == reconcile.StateFailed
	})
	for _, job := range []uint32{81, 83, 84} {
		require.Equal(t, reconcile.StateReady, h.stateOf(reconcile.RunID{Cluster: "c1", JobID: job}))
	}
}
