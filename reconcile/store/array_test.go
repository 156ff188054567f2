package store

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// An array element reserved ahead has no job id; Bind gives it the job id slurmctld gave the element, once, with
// an event in its history. The element blocks a second reservation whether bound or not, from the poller (by
// element) and from a prolog (by job id, which EnsureRun binds first); the sealed file and its job id are kept
// through the bind (the reconciler seals again).
func TestStoreBindsAnArrayElementToItsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	req := request.Request{Pool: "p", GPUs: 1}
	elem := func(task uint32) reconcile.RunID {
		return reconcile.RunID{Cluster: "c", ArrayJobID: 40, ArrayTaskID: task}
	}
	nr := func(run reconcile.RunID) reconcile.NewReservation {
		return reconcile.NewReservation{Run: run, Request: req, UserName: "ann", JobState: "PENDING", Reason: "ahead"}
	}
	created, err := s.Ensure(ctx, []reconcile.NewReservation{nr(elem(0)), nr(elem(1)), nr(elem(2))})
	require.NoError(t, err)
	require.Len(t, created, 3, "several unbound elements: a NULL job id does not collide")
	r0 := created[0]
	require.Equal(t, elem(0), r0.Run)
	require.True(t, r0.Run.Unbound())
	again, err := s.Ensure(ctx, []reconcile.NewReservation{nr(elem(0))})
	require.NoError(t, err)
	require.Empty(t, again, "an element reserved ahead blocks a second reservation")
	_, err = s.Ensure(ctx, []reconcile.NewReservation{nr(reconcile.RunID{Cluster: "c"})})
	require.ErrorContains(t, err, "no job id, and not an array's element")

	// Ready, sealed for job 0 (before it was bound).
	move(t, s, &r0, reconcile.EventRequest, "asking")
	r0.Status.SessionID = "s-0"
	move(t, s, &r0, reconcile.EventQueued, "queued")
	r0.Status.Sealed, r0.Status.SealedJobID = []byte("sealed for 0"), 0
	move(t, s, &r0, reconcile.EventActive, "active")

	// slurmctld split element 0 off as job 41.
	n, err := s.Bind(ctx, elem(0).Bound(41))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	got, err := s.Get(ctx, r0.ID)
	require.NoError(t, err)
	require.Equal(t, elem(0).Bound(41), got.Run)
	require.Equal(t, reconcile.StateReady, got.Status.State)
	require.Equal(t, r0.Status.Version, got.Status.Version, "a bind is a spec write: the status's version stays")
	require.False(t, got.SealedFor(), "sealed for job 0, not for job 41: not for the prolog")
	sealed, err := s.Sealed(ctx, r0.ID)
	require.NoError(t, err)
	require.Equal(t, []byte("sealed for 0"), sealed)
	evs, err := s.Events(ctx, r0.ID)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, reconcile.Transition{From: reconcile.StateReady, To: reconcile.StateReady, Event: "bound",
		Reason: "array element 40_0 is job 41", At: last.At}, last)
	n, err = s.Bind(ctx, elem(0).Bound(41))
	require.NoError(t, err)
	require.Zero(t, n, "bound once")

	// The prolog of job 41 finds it by its job id, as any run.
	live, err := s.LiveRun(ctx, reconcile.RunID{Cluster: "c", JobID: 41})
	require.NoError(t, err)
	require.Equal(t, r0.ID, live.ID)
	// Sealed again by the reconciler: ready for the prolog.
	got.Status.Sealed, got.Status.SealedJobID = []byte("sealed for 41"), 41
	move(t, s, &got, reconcile.EventBound, "sealed for job 41")
	got, err = s.Get(ctx, r0.ID)
	require.NoError(t, err)
	require.True(t, got.SealedFor())

	// A prolog that comes before the poller saw element 1 split off as job 42 registers the run with its element:
	// EnsureRun binds the reservation made ahead instead of making a second one.
	r1, wasCreated, err := s.EnsureRun(ctx, nr(elem(1).Bound(42)))
	require.NoError(t, err)
	require.False(t, wasCreated)
	require.Equal(t, created[1].ID, r1.ID)
	require.Equal(t, elem(1).Bound(42), r1.Run)

	// An element nobody reserved ahead is registered as any run, with its element.
	r3, wasCreated, err := s.EnsureRun(ctx, nr(elem(3).Bound(44)))
	require.NoError(t, err)
	require.True(t, wasCreated)
	require.Equal(t, elem(3).Bound(44), r3.Run)
	_, err = s.Ensure(ctx, []reconcile.NewReservation{nr(elem(3))})
	require.NoError(t, err)
	open, err := s.Open(ctx)
	require.NoError(t, err)
	require.Len(t, open, 4, "elements 0 to 3, one reservation each")
	all, err := s.ForArray(ctx, 40)
	require.NoError(t, err)
	var runs []reconcile.RunID
	for _, r := range all {
		runs = append(runs, r.Run)
	}
	require.Equal(t, []reconcile.RunID{elem(0).Bound(41), elem(1).Bound(42), elem(2), elem(3).Bound(44)}, runs)

	// Element 2 failed (never bound): done, found by its array's id.
	r2 := created[2]
	move(t, s, &r2, reconcile.EventFail, "cannot fit")
	ended, err := s.Ended(ctx, []uint32{40})
	require.NoError(t, err)
	require.Len(t, ended, 1)
	require.Equal(t, elem(2), ended[0].Run)
}
