package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
)

const trackReq = "juice:v1:pool=test,gpus=1"

// trackingPoller is a poller whose listings and discoveries are an hour apart (ListPace) on a clock the test moves.
func trackingPoller(h *harness) (*Poller, *time.Time) {
	p, _ := h.poller()
	clock := time.Now()
	p.Now = func() time.Time { return clock }
	p.Pace = ListPace{Factor: 10, Min: time.Hour, Max: time.Hour}
	p.DiscoverPace = p.Pace
	return p, &clock
}

// churn changes jobs that are not Juice jobs, as a large site's queue does every second: a listing would return the
// whole queue.
func churn(h *harness, n int) {
	for i := 0; i < n; i++ {
		h.slurm.Set(slurmrest.Job{ID: uint32(9000 + i), State: slurmrest.StatePending, StateReason: "JobHeldUser", UserName: "bob"})
	}
}

func (h *harness) run(t *testing.T, job uint32, run int) reconcile.Reservation {
	t.Helper()
	r, err := h.store.ForRun(context.Background(), reconcile.RunID{Cluster: "c1", JobID: job, Run: run})
	require.NoError(t, err)
	return r
}

// Between listings, the open reservations' jobs are tracked by one JobStates call per poll, and a job is read in
// full only when its state changed: a poll costs what changed, not the queue. The listing comes when ListPace says.
func TestPollerTracksKnownRunsBetweenListings(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, clock := trackingPoller(h)
	h.slurm.Set(fakeslurm.JuiceJob(1, 0, slurmrest.StateRunning, trackReq), fakeslurm.JuiceJob(2, 0, slurmrest.StateRunning, trackReq))
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, 1, h.slurm.Lists())
	require.True(t, h.run(t, 1, 0).Spec.Wanted)

	for i := 0; i < 5; i++ {
		churn(h, 10)
		*clock = clock.Add(time.Minute)
		require.NoError(t, p.Poll(ctx))
	}
	require.Equal(t, 1, h.slurm.Lists(), "no listing before ListPace says")
	require.Equal(t, 5, h.slurm.States(), "one JobStates per poll")
	require.Zero(t, h.slurm.Gets(), "no state changed: no job read")

	// Job 1 ends: its state changes, it alone is read, and its run is let go (at the next poll, a second later:
	// the tracking's pace allows a few milliseconds' worth of states at every poll, not twice in one instant).
	h.slurm.Set(fakeslurm.JuiceJob(1, 0, slurmrest.StateCompleted, trackReq))
	*clock = clock.Add(time.Second)
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, 1, h.slurm.Lists())
	require.Equal(t, 1, h.slurm.Gets())
	r := h.run(t, 1, 0)
	require.False(t, r.Spec.Wanted)
	require.True(t, r.Spec.RunOver)
	require.Contains(t, r.Spec.WantReason, "ended")
	require.True(t, h.run(t, 2, 0).Spec.Wanted)

	// The listing is never put off for ever: once Max has passed, the poll lists.
	*clock = clock.Add(time.Hour)
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, 2, h.slurm.Lists())
}

// A requeued job shows as a state change (RUNNING → PENDING); the one GET it causes gives the new run, and the old
// run is let go. A job gone from slurmctld is absent from the reply; one GET confirms it.
func TestPollerTrackingSeesRequeueAndVanish(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, _ := trackingPoller(h)
	h.slurm.Set(fakeslurm.JuiceJob(3, 0, slurmrest.StateRunning, trackReq), fakeslurm.JuiceJob(4, 0, slurmrest.StateRunning, trackReq))
	require.NoError(t, p.Poll(ctx))

	requeued := fakeslurm.JuiceJob(3, 1, slurmrest.StatePending, trackReq)
	requeued.StateReason = "BeginTime"
	h.slurm.Set(requeued)
	h.slurm.Remove(4)
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, 1, h.slurm.Lists())
	require.Equal(t, 2, h.slurm.Gets(), "one GET for the changed job, one to confirm the vanished one")
	r3 := h.run(t, 3, 0)
	require.False(t, r3.Spec.Wanted)
	require.Contains(t, r3.Spec.WantReason, "requeued")
	r4 := h.run(t, 4, 0)
	require.False(t, r4.Spec.Wanted)
	require.Equal(t, "GONE", r4.Spec.JobState)
}

// The known runs' states are asked at TrackPace once they need more than one request (StatesBatch): a large
// tracked set is not asked at every poll, and is asked again once the pace allows; an end seen then is acted on as
// at any poll. A set that fits in one request is asked at every poll.
func TestPollerTracksKnownRunsAtTrackPace(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, clock := trackingPoller(h)
	p.TrackPace = ListPace{Factor: 10, Min: time.Minute, Max: time.Minute}
	h.slurm.Set(fakeslurm.JuiceJob(7, 0, slurmrest.StateRunning, trackReq))
	require.NoError(t, p.Poll(ctx)) // the listing
	for i := 0; i < 3; i++ {
		*clock = clock.Add(time.Second)
		require.NoError(t, p.Poll(ctx))
	}
	require.Equal(t, 3, h.slurm.States(), "one request's worth of runs: tracked at every poll")

	for i := 0; i < slurmrest.StatesBatch; i++ {
		h.slurm.Set(fakeslurm.JuiceJob(uint32(20000+i), 0, slurmrest.StateRunning, trackReq))
	}
	*clock = clock.Add(2 * time.Hour) // a listing is due: it finds them
	require.NoError(t, p.Poll(ctx))
	*clock = clock.Add(time.Second)
	require.NoError(t, p.Poll(ctx)) // the first tracking of all of them
	calls := h.slurm.States()
	require.Equal(t, 4, calls)
	h.slurm.Set(fakeslurm.JuiceJob(7, 0, slurmrest.StateCompleted, trackReq))
	for i := 0; i < 5; i++ {
		*clock = clock.Add(10 * time.Second)
		require.NoError(t, p.Poll(ctx))
	}
	require.Equal(t, calls, h.slurm.States(), "not tracked again within the pace")
	require.True(t, h.run(t, 7, 0).Spec.Wanted, "its end not seen yet")
	*clock = clock.Add(11 * time.Second)
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, calls+1, h.slurm.States())
	require.False(t, h.run(t, 7, 0).Spec.Wanted, "the end seen at the next tracking")
}

// Without discoveries, new Juice jobs are found by the listings alone: a job submitted between listings waits for
// the next one.
func TestPollerDiscoversNewJobsAtListingPace(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, clock := trackingPoller(h)
	h.slurm.Set(fakeslurm.JuiceJob(5, 0, slurmrest.StateRunning, trackReq))
	require.NoError(t, p.Poll(ctx))
	h.slurm.Set(fakeslurm.JuiceJob(6, 0, slurmrest.StatePending, trackReq))
	*clock = clock.Add(30 * time.Minute)
	require.NoError(t, p.Poll(ctx))
	_, err := h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 6})
	require.Error(t, err, "not listed yet")
	*clock = clock.Add(31 * time.Minute) // the hour runs from the listing's end
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, 2, h.slurm.Lists())
	require.True(t, h.run(t, 6, 0).Spec.Wanted, "reserved ahead once listed")
	// Now tracked: its start is a state change seen by the next poll, without a listing.
	h.slurm.Set(fakeslurm.JuiceJob(6, 0, slurmrest.StateConfiguring, trackReq))
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, 2, h.slurm.Lists())
	require.Equal(t, "CONFIGURING", h.run(t, 6, 0).Spec.JobState)
}

// Between listings, a discovery (every job's state) finds the jobs submitted since, at one GET per new job id, Juice
// job or not; a job seen once is not read again, and an ended one not at all.
func TestPollerDiscoversNewJobsBetweenListings(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, clock := trackingPoller(h)
	p.DiscoverPace = ListPace{Factor: 10, Min: time.Minute, Max: time.Minute}
	h.slurm.Set(fakeslurm.JuiceJob(5, 0, slurmrest.StateRunning, trackReq))
	churn(h, 3) // in the first listing: seen
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, 1, h.slurm.Lists())

	h.slurm.Set(fakeslurm.JuiceJob(6, 0, slurmrest.StatePending, trackReq),
		slurmrest.Job{ID: 7, State: slurmrest.StatePending, StateReason: "Priority", UserName: "bob"},
		slurmrest.Job{ID: 8, State: slurmrest.StateCompleted, UserName: "bob"})
	*clock = clock.Add(30 * time.Second)
	require.NoError(t, p.Poll(ctx))
	require.Zero(t, h.slurm.AllStates(), "no discovery before DiscoverPace says")
	_, err := h.store.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: 6})
	require.Error(t, err, "not discovered yet")

	*clock = clock.Add(31 * time.Second)
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, 1, h.slurm.AllStates())
	require.Equal(t, 1, h.slurm.Lists(), "found without a listing")
	require.Equal(t, 2, h.slurm.Gets(), "one GET per new live job id: 6 and 7, not the ended 8 nor the listed ones")
	require.True(t, h.run(t, 6, 0).Spec.Wanted, "reserved ahead once discovered")

	*clock = clock.Add(2 * time.Minute)
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, 2, h.slurm.AllStates())
	require.Equal(t, 2, h.slurm.Gets(), "ids seen once are not read again")
}

// Without jobs/state (Slurm 22.05), every poll lists, as before. (juice-bench-scale measures the design before
// issue 14 this way: the poller on an API without jobs/state.)
func TestPollerListsEveryPollWithoutStates(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	p, _ := trackingPoller(h)
	h.slurm.Legacy()
	h.slurm.Set(fakeslurm.JuiceJob(7, 0, slurmrest.StateRunning, trackReq))
	for i := 0; i < 3; i++ {
		churn(h, 1)
		require.NoError(t, p.Poll(ctx))
	}
	require.Equal(t, 3, h.slurm.Lists())
	require.Zero(t, h.slurm.States())
}

func TestListPaceAfter(t *testing.T) {
	t.Parallel()
	pace := ListPace{Factor: 10, Min: time.Second, Max: time.Minute}
	require.Equal(t, 20*time.Second, pace.after(2*time.Second))
	require.Equal(t, time.Minute, pace.after(30*time.Second), "bounded by Max")
	require.Equal(t, time.Second, pace.after(time.Millisecond), "bounded by Min")
	require.Equal(t, 10*time.Millisecond, ListPace{}.after(time.Millisecond), "the default factor")
	require.Equal(t, DefaultListPace.Max, ListPace{}.after(time.Hour), "the default Max")
}
