package reconcile

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// newTestStore gives a test a migrated store on a fresh database of its own.
func newTestStore(t *testing.T) *PGStore {
	t.Helper()
	url := testbed.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := NewPGStore(pool)
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

func TestStoreLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	require.NoError(t, s.Migrate(ctx), "a second migration is a no-op")

	run := RunID{"c", 10, 0}
	nr := NewReservation{Run: run, Request: Request{Pool: "p", GPUs: 2}, UserName: "alice", Partition: "debug", Reason: "seen pending"}
	r, created, err := s.Ensure(ctx, nr)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, StatePending, r.State)
	require.True(t, r.Wanted)
	require.Equal(t, Request{Pool: "p", GPUs: 2}, r.Request)

	again, created, err := s.Ensure(ctx, nr)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, r.ID, again.ID)

	tr, err := Apply(&r, EventRequest, "asking pool p", time.Now())
	require.NoError(t, err)
	require.NoError(t, s.Save(ctx, &r, &tr))

	// A writer holding the old version loses.
	stale := again
	stale.Reason = "stale"
	require.ErrorIs(t, s.Save(ctx, &stale, nil), ErrConflict)

	r.SessionID = "sess-1"
	tr, _ = Apply(&r, EventQueued, "queued", time.Now())
	require.NoError(t, s.Save(ctx, &r, &tr))
	r.Sealed = []byte{1, 2, 3}
	r.ReadyAt = time.Now()
	tr, _ = Apply(&r, EventActive, "active", time.Now())
	require.NoError(t, s.Save(ctx, &r, &tr))

	got, err := s.ForRun(ctx, run)
	require.NoError(t, err)
	require.Equal(t, StateReady, got.State)
	require.Equal(t, []byte{1, 2, 3}, got.Sealed)
	require.Equal(t, "sess-1", got.SessionID)
	require.False(t, got.ReadyAt.IsZero())

	open, err := s.Open(ctx)
	require.NoError(t, err)
	require.Len(t, open, 1)

	tr, _ = Apply(&got, EventUnwanted, "job completed", time.Now())
	got.Wanted = false
	require.NoError(t, s.Save(ctx, &got, &tr))
	tr, _ = Apply(&got, EventClosed, "session cancelled", time.Now())
	require.NoError(t, s.Save(ctx, &got, &tr))

	// Released: the run may be reserved again (a job released while held, then let go), as a new row.
	fresh, created, err := s.Ensure(ctx, nr)
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, r.ID, fresh.ID)

	evs, err := s.Events(ctx, r.ID)
	require.NoError(t, err)
	var path []State
	for _, e := range evs {
		path = append(path, e.To)
	}
	require.Equal(t, []State{StatePending, StateRequesting, StateWaiting, StateReady, StateReleasing, StateReleased}, path)
	require.Equal(t, "job completed", evs[4].Reason)

	jobs, err := s.ForJob(ctx, "c", 10)
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	sum, err := s.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, []Count{{"p", StatePending, 1}, {"p", StateReleased, 1}}, sum)
}

// Many replicas registering the same run at once make exactly one reservation.
func TestStoreEnsureIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	nr := NewReservation{Run: RunID{"c", 77, 1}, Request: Request{Pool: "p", GPUs: 1}}
	var wg sync.WaitGroup
	ids := make(chan string, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := s.Ensure(ctx, nr)
			require.NoError(t, err)
			ids <- r.ID.String()
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	require.Len(t, seen, 1)
}

func TestStoreLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	ok, err := s.AcquireLease(ctx, "leader", "a", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.AcquireLease(ctx, "leader", "b", time.Second)
	require.NoError(t, err)
	require.False(t, ok, "b must not take a lease a holds")
	ok, err = s.AcquireLease(ctx, "leader", "a", 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok, "a renews")
	holder, _, err := s.LeaseHolder(ctx, "leader")
	require.NoError(t, err)
	require.Equal(t, "a", holder)
	time.Sleep(300 * time.Millisecond)
	ok, err = s.AcquireLease(ctx, "leader", "b", time.Second)
	require.NoError(t, err)
	require.True(t, ok, "b takes an expired lease")
	require.NoError(t, s.ReleaseLease(ctx, "leader", "a"), "releasing a lease one does not hold changes nothing")
	holder, _, _ = s.LeaseHolder(ctx, "leader")
	require.Equal(t, "b", holder)
	require.NoError(t, s.ReleaseLease(ctx, "leader", "b"))
	holder, _, _ = s.LeaseHolder(ctx, "leader")
	require.Equal(t, "", holder)
}

// A run that is over never gets another reservation; one released while its job was held does.
func TestStoreRunOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	release := func(r *Reservation, over bool) {
		t.Helper()
		r.RunOver = over
		tr, err := Apply(r, EventUnwanted, "let go", time.Now())
		require.NoError(t, err)
		require.NoError(t, s.Save(ctx, r, &tr))
		require.Equal(t, StateReleased, r.State)
	}
	held := NewReservation{Run: RunID{"c", 1, 0}, Request: Request{Pool: "p", GPUs: 1}}
	r, _, err := s.Ensure(ctx, held)
	require.NoError(t, err)
	release(&r, false)
	again, created, err := s.Ensure(ctx, held)
	require.NoError(t, err)
	require.True(t, created, "a run released while held is reserved again")

	release(&again, true)
	last, created, err := s.Ensure(ctx, held)
	require.NoError(t, err)
	require.False(t, created, "a run that is over is never reserved again")
	require.Equal(t, again.ID, last.ID)
	require.True(t, last.RunOver)
	got, err := s.ForRun(ctx, held.Run)
	require.NoError(t, err)
	require.Equal(t, again.ID, got.ID)
}
