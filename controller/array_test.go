package controller

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeclock"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
)

const arrayReq = "juice:v1:pool=test,gpus=1"

// remainder is array 40's pending remainder as slurmctld lists it: the array's job id, no task id, the pending
// task ids.
func remainder(pending string) slurmrest.Job {
	j := fakeslurm.JuiceJob(40, 0, slurmrest.StatePending, arrayReq)
	j.StateReason = "Resources"
	j.Array = &slurmrest.ArrayInfo{JobID: 40, Pending: pending}
	return j
}

// split is element task of array 40 split off as job id, in state.
func split(id, task uint32, state slurmrest.JobState) slurmrest.Job {
	j := fakeslurm.JuiceJob(id, 0, state, arrayReq)
	j.Array = &slurmrest.ArrayInfo{JobID: 40, TaskID: task, HasTask: true}
	return j
}

// elementsOf lists the open reservations' runs by task id.
func (h *harness) elementsOf(t *testing.T) []reconcile.Reservation {
	open, err := h.store.Open(context.Background())
	require.NoError(t, err)
	sort.Slice(open, func(i, j int) bool { return open[i].Run.ArrayTaskID < open[j].Run.ArrayTaskID })
	return open
}

func runsOf(rs []reconcile.Reservation) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Run.String())
	}
	return out
}

// An array's pending elements are reserved ahead in Slurm's order, within the look-ahead's caps, by element (no
// job id yet); the pending remainder itself never is. When slurmctld splits an element off as a job of its own,
// its reservation is bound to that job (seen by the poller, or by the prolog before the poller), sealed again for
// it, and the prolog is handed a file that opens for that job at once. An element cancelled while pending lets
// its reservation go, and the last element, which takes the remainder's job id, is bound to it.
func TestArrayElementsAreReservedAheadAndBoundToTheirJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	h.slurm.Set(remainder("0-5"))
	c, _ := h.startController("a", Config{Lookahead: reconcile.Lookahead{PerPool: 4, PerUser: 2}})
	client := &hookapi.Client{URL: "http://" + c.Listener.Addr().String(), Secret: h.secret}

	eventually(t, 10*time.Second, "elements 0 and 1 ready ahead", func() bool {
		open := h.elementsOf(t)
		return len(open) == 2 && open[0].Status.State == reconcile.StateReady && open[1].Status.State == reconcile.StateReady
	})
	open := h.elementsOf(t)
	require.Equal(t, []string{"c1/40_0.0", "c1/40_1.0"}, runsOf(open), "the first two by task id (PerUser 2), none for the remainder")
	rs, err := h.store.ForJob(ctx, 40)
	require.NoError(t, err)
	require.Empty(t, rs, "the pending remainder (job 40) is not a run")

	// slurmctld starts element 0 as job 41; the poller binds it, the reconciler seals for job 41.
	h.slurm.Set(remainder("1-5"), split(41, 0, slurmrest.StateConfiguring))
	rep := prolog(t, client, 41)
	require.Equal(t, hookapi.OutcomeReady, rep.Outcome, "%+v", rep)
	opens(t, h, rep, 41)
	r41, err := h.store.LiveRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 41})
	require.NoError(t, err)
	require.Equal(t, open[0].ID, r41.ID, "element 0's reservation made ahead serves job 41")
	require.Equal(t, []string{"created", "request", "queued", "active", "bound", "bound"}, eventsOf(t, h, r41),
		"ready before the job existed; bound (spec), then sealed again (status) without asking Juice")

	// Element 1 starts as job 42, and its prolog comes before any listing shows job 42 (a stale listing): the
	// prolog binds the reservation made ahead itself.
	stale := h.slurm.Listing()
	h.slurm.Intercept(fakeslurm.Funcs{ListJobs: func(context.Context, time.Time, func(context.Context, time.Time) (slurmrest.JobList, error)) (slurmrest.JobList, error) {
		return stale, nil
	}})
	h.slurm.Set(remainder("2-5"), split(41, 0, slurmrest.StateRunning), split(42, 1, slurmrest.StateConfiguring))
	rep = prolog(t, client, 42)
	require.Equal(t, hookapi.OutcomeReady, rep.Outcome, "%+v", rep)
	opens(t, h, rep, 42)
	r42, err := h.store.LiveRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 42})
	require.NoError(t, err)
	require.Equal(t, open[1].ID, r42.ID, "element 1's reservation made ahead serves job 42")
	h.slurm.Intercept(fakeslurm.Funcs{})

	// Elements 2 and 3 are reserved ahead next; 2 is cancelled while pending (scancel 40_2): its reservation goes,
	// and element 4 takes its place.
	eventually(t, 10*time.Second, "elements 2 and 3 ahead", func() bool {
		return fmt.Sprint(runsOf(h.elementsOf(t))) == "[c1/41.0 (40_0) c1/42.0 (40_1) c1/40_2.0 c1/40_3.0]"
	})
	e2 := h.elementsOf(t)[2]
	h.slurm.Set(remainder("3-5"))
	eventually(t, 10*time.Second, "element 2 released, element 4 ahead", func() bool {
		return fmt.Sprint(runsOf(h.elementsOf(t))) == "[c1/41.0 (40_0) c1/42.0 (40_1) c1/40_3.0 c1/40_4.0]"
	})
	got, err := h.store.Get(ctx, e2.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.StateReleased, got.Status.State)
	require.True(t, got.Spec.RunOver)
	require.Equal(t, "array element 40_2 is no longer pending", got.Spec.WantReason)

	// Elements 3 and 4 start as jobs 43 and 44; the last one, 5, takes the remainder's record: job 40.
	last := split(40, 5, slurmrest.StateConfiguring)
	h.slurm.Set(split(43, 3, slurmrest.StateConfiguring), split(44, 4, slurmrest.StateConfiguring), last)
	for _, id := range []uint32{43, 44, 40} {
		rep := prolog(t, client, id)
		require.Equal(t, hookapi.OutcomeReady, rep.Outcome, "job %d: %+v", id, rep)
		opens(t, h, rep, id)
	}
	r40, err := h.store.LiveRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 40})
	require.NoError(t, err)
	require.Equal(t, reconcile.RunID{Cluster: "c1", JobID: 40, ArrayJobID: 40, ArrayTaskID: 5}, r40.Run)
	require.Len(t, h.elementsOf(t), 6-1, "one reservation per element that ran")
	require.Len(t, h.liveSessions(), 5)
}

func prolog(t *testing.T, client *hookapi.Client, job uint32) hookapi.PrologReply {
	t.Helper()
	var rep hookapi.PrologReply
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		rep, err = client.Prolog(context.Background(), hookapi.PrologRequest{Cluster: "c1", JobID: job, WaitSeconds: 5})
		require.NoError(t, err)
		if rep.Outcome != hookapi.OutcomeWaiting {
			return rep
		}
	}
	return rep
}

// opens checks that the file the prolog got opens for job, as the compute node opens it.
func opens(t *testing.T, h *harness, rep hookapi.PrologReply, job uint32) {
	t.Helper()
	b := session.Binding{Cluster: "c1", JobID: job}
	require.Equal(t, session.FileName(b), rep.File)
	_, err := session.Open(rep.Session, b, h.key)
	require.NoError(t, err, "the file handed to job %d's prolog", job)
}

func eventsOf(t *testing.T, h *harness, r reconcile.Reservation) []string {
	t.Helper()
	evs, err := h.store.Events(context.Background(), r.ID)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Event))
	}
	return out
}

// A session its agent is starting (assigned) is looked at again sooner than one still queued: the job of an
// array's next element often waits for it in its prolog.
func TestAnAssignedSessionIsLookedAtSooner(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(time.Now())
	h := newHarnessWith(t, juicesim.Legacy{}, func(c *juicesim.Config) { c.Now, c.ActivateDelay = clock.Now, time.Second })
	ctx := context.Background()
	rc := h.reconciler(nil)
	rc.WaitPoll = time.Second
	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 10}, gpus2)
	got := h.driveTo(rc, r.ID, reconcile.StateWaiting)
	s, err := h.juice.GetSession(ctx, got.Status.SessionID)
	require.NoError(t, err)
	require.Equal(t, juiceapi.StateAssigned, s.State)
	res, err := rc.Reconcile(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, 200*time.Millisecond, res.RequeueAfter)
	clock.Add(time.Second)
	h.driveTo(rc, r.ID, reconcile.StateReady)
}

// While started jobs of a pool still wait for their sessions, they take the pool's look-ahead places first: an
// array whose elements slurmctld starts faster than the pool serves them gets no element reserved ahead, which
// would hold GPUs for elements that cannot start while started ones wait in their prologs. Once they are served,
// the places go to the array's next elements.
func TestStartedElementsWaitingTakeThePoolsPlaces(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, _ := h.poller()
	p.Lookahead = reconcile.Lookahead{PerPool: 2, PerUser: 4}
	h.slurm.Set(remainder("2-9"), split(41, 0, slurmrest.StateConfiguring), split(42, 1, slurmrest.StateConfiguring))
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, []string{"c1/41.0 (40_0)", "c1/42.0 (40_1)"}, runsOf(h.elementsOf(t)), "no element reserved ahead")

	rc := h.reconciler(nil)
	for _, r := range h.elementsOf(t) {
		h.driveTo(rc, r.ID, reconcile.StateReady)
	}
	p.Kick()
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, []string{"c1/41.0 (40_0)", "c1/42.0 (40_1)", "c1/40_2.0", "c1/40_3.0"}, runsOf(h.elementsOf(t)))
}

// A held array (scontrol hold on its job id holds its pending remainder) lets its elements' reservations made
// ahead go without ending their runs; once let go, its elements are reserved ahead again.
func TestHeldArrayLetsItsElementsGoUntilReleased(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, _ := h.poller()
	p.Lookahead = reconcile.Lookahead{PerPool: 2, PerUser: 2}
	h.slurm.Set(remainder("0-5"))
	require.NoError(t, p.Poll(ctx))
	ahead := h.elementsOf(t)
	require.Equal(t, []string{"c1/40_0.0", "c1/40_1.0"}, runsOf(ahead))

	held := remainder("0-5")
	held.Priority, held.StateReason = 0, "JobHeldUser"
	h.slurm.Set(held)
	require.NoError(t, p.Poll(ctx))
	rc := h.reconciler(nil)
	for _, r := range ahead {
		got, err := h.store.Get(ctx, r.ID)
		require.NoError(t, err)
		require.False(t, got.Spec.Wanted)
		require.False(t, got.Spec.RunOver, "held, not over")
		require.Equal(t, "array 40 is held (JobHeldUser)", got.Spec.WantReason)
		h.driveTo(rc, r.ID, reconcile.StateReleased)
	}
	require.Empty(t, h.elementsOf(t))

	h.slurm.Set(remainder("0-5"))
	require.NoError(t, p.Poll(ctx))
	again := h.elementsOf(t)
	require.Equal(t, []string{"c1/40_0.0", "c1/40_1.0"}, runsOf(again), "reserved ahead again once let go")
	require.NotEqual(t, ahead[0].ID, again[0].ID, "a new reservation")
}
