package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/memstore"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

var ctx = context.Background()

func reservation(state reconcile.State) reconcile.Reservation {
	return reconcile.Reservation{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: 7},
		Request: request.Request{Pool: "test", GPUs: 2}, UserName: "alice",
		Spec: reconcile.Spec{Wanted: true}, Status: reconcile.Status{State: state, Version: 1}}
}

// move applies ev to r and saves it.
func move(t *testing.T, s reconcile.Store, r *reconcile.Reservation, ev reconcile.Event) error {
	t.Helper()
	tr, err := reconcile.Apply(r, ev, "because", time.Now())
	require.NoError(t, err)
	return s.SaveStatus(ctx, r, tr)
}

func TestSaveStatusChecksTheVersionAndRecordsHistory(t *testing.T) {
	s := &memstore.Store{}
	r := reservation(reconcile.StatePending)
	s.Put(r)
	stale := r

	require.NoError(t, move(t, s, &r, reconcile.EventRequest))
	assert.Equal(t, int64(2), r.Status.Version, "the caller's copy carries the new version")
	err := move(t, s, &stale, reconcile.EventWait)
	require.ErrorIs(t, err, reconcile.ErrConflict)

	got, err := s.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, reconcile.StateRequesting, got.Status.State, "the conflicting write changed nothing")
	require.Len(t, s.Events(r.ID), 1)
	assert.Equal(t, reconcile.EventRequest, s.Events(r.ID)[0].Event)

	require.Error(t, s.SaveStatus(ctx, &r), "a write without a transition")
	_, err = s.Get(ctx, uuid.New())
	require.ErrorIs(t, err, reconcile.ErrNotFound)
}

func TestTheSealedFileIsKeptApartAndDroppedWhenFinal(t *testing.T) {
	s := &memstore.Store{}
	r := reservation(reconcile.StateReady)
	r.Status.Sealed, r.Status.SealedJobID = []byte("sealed for 7"), 7
	s.Put(r)

	got, err := s.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Nil(t, got.Status.Sealed, "Get leaves the file out")
	assert.Equal(t, uint32(7), got.Status.SealedJobID)

	// A write without a file keeps the stored one, and the job it is sealed for.
	got.Status.SealedJobID = 9
	require.NoError(t, move(t, s, &got, reconcile.EventBound))
	sealed, err := s.Sealed(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, []byte("sealed for 7"), sealed)
	got, _ = s.Get(ctx, r.ID)
	assert.Equal(t, uint32(7), got.Status.SealedJobID)

	// A write with one replaces it.
	got.Status.Sealed, got.Status.SealedJobID = []byte("sealed for 9"), 9
	require.NoError(t, move(t, s, &got, reconcile.EventBound))
	sealed, _ = s.Sealed(ctx, r.ID)
	assert.Equal(t, []byte("sealed for 9"), sealed)

	// Final: dropped, even when the write carries one.
	got, _ = s.Get(ctx, r.ID)
	require.NoError(t, move(t, s, &got, reconcile.EventUnwanted))
	got.Status.Sealed = []byte("still here")
	require.NoError(t, move(t, s, &got, reconcile.EventClosed))
	sealed, err = s.Sealed(ctx, r.ID)
	require.NoError(t, err)
	assert.Nil(t, sealed)
	got, _ = s.Get(ctx, r.ID)
	assert.Zero(t, got.Status.SealedJobID)

	_, err = s.Sealed(ctx, uuid.New())
	require.ErrorIs(t, err, reconcile.ErrNotFound)
}

func TestHeldGPUsCountsRunsAskedAndNotReleased(t *testing.T) {
	s := &memstore.Store{}
	for _, st := range reconcile.States {
		s.Put(reservation(st))
	}
	other := reservation(reconcile.StateReady)
	other.UserName = "bob"
	s.Put(other)
	elsewhere := reservation(reconcile.StateReady)
	elsewhere.Request.Pool = "big"
	s.Put(elsewhere)

	n, err := s.HeldGPUs(ctx, "test", "alice")
	require.NoError(t, err)
	assert.Equal(t, 4*2, n, "requesting, waiting, ready and releasing: 2 GPUs each")
}

func TestUpdateWritesTheSpecOnly(t *testing.T) {
	s := &memstore.Store{}
	r := reservation(reconcile.StateReady)
	s.Put(r)
	require.True(t, s.Update(r.ID, func(r *reconcile.Reservation) {
		r.Spec.Wanted = false
		r.Status.State = reconcile.StateReleased // not the observer's to write
	}))
	got, _ := s.Get(ctx, r.ID)
	assert.False(t, got.Spec.Wanted)
	assert.Equal(t, reconcile.StateReady, got.Status.State)
	assert.Equal(t, int64(1), got.Status.Version, "an observer's write does not move the version")
	assert.False(t, s.Update(uuid.New(), func(*reconcile.Reservation) {}))
}

func TestInterceptCallsTheFuncOrThrough(t *testing.T) {
	s := &memstore.Store{}
	r := reservation(reconcile.StatePending)
	s.Put(r)
	boom := errors.New("boom")
	i := memstore.Intercept(s, memstore.Funcs{
		HeldGPUs: func(ctx context.Context, next reconcile.Store, pool, user string) (int, error) { return 0, boom },
	})
	_, err := i.HeldGPUs(ctx, "test", "alice")
	require.ErrorIs(t, err, boom)
	got, err := i.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, r.ID, got.ID)
}
