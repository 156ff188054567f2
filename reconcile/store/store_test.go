package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/memstore"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// newTestStore gives a test a store of cluster "c" on a fresh database of its own, migrated by the owner role
// and used as the runtime role, as the controller uses it.
func newTestStore(t *testing.T) *Store {
	t.Helper()
	_, s := newStores(t, "c")
	return s
}

// newStores migrates a fresh database as the owner role, grants the runtime role its rights, and returns a
// store of cluster as each role.
func newStores(t *testing.T, cluster string) (owner, runtime *Store) {
	t.Helper()
	db := testbed.NewMigrated(t, migrate)
	return New(newPool(t, db.Owner), cluster), New(newPool(t, db.Runtime), cluster)
}

// migrate is test/world's Migrate, which these tests cannot import (it imports this package): Migrate as the
// owner role, then GrantRuntime, as juice-slurm migrate --runtime-role does.
func migrate(ctx context.Context, ownerURL, runtimeRole string) error {
	pool, err := pgxpool.New(ctx, ownerURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	s := New(pool, "")
	if err := s.Migrate(ctx); err != nil {
		return err
	}
	return s.GrantRuntime(ctx, runtimeRole)
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func ensure(t *testing.T, s *Store, nr reconcile.NewReservation) (reconcile.Reservation, bool) {
	t.Helper()
	r, created, err := s.EnsureRun(context.Background(), nr)
	require.NoError(t, err)
	return r, created
}

// move applies an event and saves the status, as the reconciler does.
func move(t *testing.T, s *Store, r *reconcile.Reservation, ev reconcile.Event, reason string) {
	t.Helper()
	tr, err := reconcile.Apply(r, ev, reason, time.Now())
	require.NoError(t, err)
	require.NoError(t, s.SaveStatus(context.Background(), r, tr))
}

func TestStoreLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner, s := newStores(t, "c")
	require.NoError(t, owner.Migrate(ctx), "a second migration is a no-op")

	run := reconcile.RunID{Cluster: "c", JobID: 10}
	nr := reconcile.NewReservation{Run: run, Request: request.Request{Pool: "p", GPUs: 2}, UserName: "alice",
		Partition: "debug", Reason: "seen pending"}
	r, created := ensure(t, s, nr)
	require.True(t, created)
	require.Equal(t, reconcile.StatePending, r.Status.State)
	require.True(t, r.Spec.Wanted)
	require.Equal(t, request.Request{Pool: "p", GPUs: 2}, r.Request)
	again, created := ensure(t, s, nr)
	require.False(t, created)
	require.Equal(t, r.ID, again.ID)

	move(t, s, &r, reconcile.EventRequest, "asking pool p")
	// A status write based on an old version loses.
	stale := again
	require.ErrorIs(t, s.SaveStatus(ctx, &stale, reconcile.Transition{}), reconcile.ErrConflict)

	r.Status.SessionID = "sess-1"
	move(t, s, &r, reconcile.EventQueued, "queued")
	r.Status.Sealed, r.Status.ReadyAt = []byte{1, 2, 3}, time.Now()
	move(t, s, &r, reconcile.EventActive, "active")

	got, err := s.ForRun(ctx, run)
	require.NoError(t, err)
	require.Equal(t, reconcile.StateReady, got.Status.State)
	require.Nil(t, got.Status.Sealed, "reads leave the sealed file out")
	require.Equal(t, "sess-1", got.Status.SessionID)
	require.False(t, got.Status.ReadyAt.IsZero())
	sealed, err := s.Sealed(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, []byte{1, 2, 3}, sealed)
	// A prolog's one query: the same row, and the file with it.
	live, sealed, err := s.LiveRunSealed(ctx, run)
	require.NoError(t, err)
	require.Equal(t, got, live)
	require.Equal(t, []byte{1, 2, 3}, sealed)
	_, _, err = s.LiveRunSealed(ctx, reconcile.RunID{Cluster: run.Cluster, JobID: run.JobID, Run: run.Run + 1})
	require.ErrorIs(t, err, reconcile.ErrNotFound)

	// A status write that does not carry the sealed file keeps it.
	r.Status.Sealed = nil
	got.Status.Reason = "still there"
	open, err := s.Open(ctx)
	require.NoError(t, err)
	require.Len(t, open, 1)

	changed, err := s.Unwant(ctx, r.ID, "job completed", true)
	require.NoError(t, err)
	require.True(t, changed)
	changed, err = s.Unwant(ctx, r.ID, "said twice", true)
	require.NoError(t, err)
	require.False(t, changed, "an observer's repeated write changes nothing")
	move(t, s, &r, reconcile.EventUnwanted, "job completed")
	sealed, _ = s.Sealed(ctx, r.ID)
	require.Equal(t, []byte{1, 2, 3}, sealed, "kept through a status write without it")
	move(t, s, &r, reconcile.EventClosed, "session cancelled")
	sealed, _ = s.Sealed(ctx, r.ID)
	require.Nil(t, sealed, "dropped once final")

	evs, err := s.Events(ctx, r.ID)
	require.NoError(t, err)
	var path []reconcile.State
	for _, e := range evs {
		path = append(path, e.To)
	}
	require.Equal(t, []reconcile.State{reconcile.StatePending, reconcile.StateRequesting, reconcile.StateWaiting,
		reconcile.StateReady, reconcile.StateReleasing, reconcile.StateReleased}, path)
	require.Equal(t, "job completed", evs[4].Reason)
	sum, err := s.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, []Count{{"p", reconcile.StateReleased, 1}}, sum)
}

// An observer's write never conflicts with a transition, never moves the status version, and never touches
// the sealed session file (the first version wiped it when the poller recorded a job's state).
func TestObserverWritesLeaveTheStatusAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	r, _ := ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: 5}, Request: request.Request{Pool: "p", GPUs: 1}})
	move(t, s, &r, reconcile.EventRequest, "asking")
	r.Status.SessionID = "s"
	move(t, s, &r, reconcile.EventQueued, "queued")
	r.Status.Sealed = []byte("sealed session")
	move(t, s, &r, reconcile.EventActive, "active")
	version := r.Status.Version

	require.NoError(t, s.ObserveJob(ctx, r.ID, "RUNNING", "None"))
	require.NoError(t, s.ObserveJob(ctx, r.ID, "RUNNING", "None"))
	_, err := s.Unwant(ctx, r.ID, "job 5 ended: COMPLETED", true)
	require.NoError(t, err)

	got, err := s.Get(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, version, got.Status.Version, "observers do not move the status version")
	require.Equal(t, "RUNNING", got.Spec.JobState)
	require.False(t, got.Spec.Wanted)
	require.True(t, got.Spec.RunOver)
	require.Equal(t, "job 5 ended: COMPLETED", got.Spec.WantReason)
	sealed, err := s.Sealed(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, []byte("sealed session"), sealed)
	// The reconciler's write, based on the version it read before the observers wrote, still goes through.
	move(t, s, &r, reconcile.EventUnwanted, got.Spec.WantReason)
}

// Many replicas registering the same run at once make exactly one reservation.
func TestStoreEnsureIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	nr := reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: 77, Run: 1}, Request: request.Request{Pool: "p", GPUs: 1}}
	var wg sync.WaitGroup
	type result struct {
		id  uuid.UUID
		err error
	}
	results := make(chan result, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := s.EnsureRun(ctx, nr)
			results <- result{r.ID, err}
		}()
	}
	wg.Wait()
	close(results)
	seen := map[uuid.UUID]bool{}
	for r := range results {
		require.NoError(t, r.err)
		seen[r.id] = true
	}
	require.Len(t, seen, 1)
}

// Ensure of many runs is one statement; runs that have a live reservation or are done are left alone.
func TestStoreEnsureMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	nr := func(job uint32) reconcile.NewReservation {
		return reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: job}, Request: request.Request{Pool: "p", GPUs: 1}}
	}
	live, _ := ensure(t, s, nr(1))
	failed, _ := ensure(t, s, nr(2))
	move(t, s, &failed, reconcile.EventFail, "never fits")
	seen := nr(4)
	seen.JobState, seen.JobReason = "PENDING", "Priority"
	created, err := s.Ensure(ctx, []reconcile.NewReservation{nr(1), nr(2), nr(3), seen})
	require.NoError(t, err)
	require.Len(t, created, 2)
	require.ElementsMatch(t, []uint32{3, 4}, []uint32{created[0].Run.JobID, created[1].Run.JobID})
	// What Slurm said of the job is in the spec from the start: the next poll has nothing to write.
	r4, err := s.Get(ctx, created[slices.IndexFunc(created, func(r reconcile.Reservation) bool { return r.Run.JobID == 4 })].ID)
	require.NoError(t, err)
	require.Equal(t, [2]string{"PENDING", "Priority"}, [2]string{r4.Spec.JobState, r4.Spec.JobReason})
	ended, err := s.Ended(ctx, []uint32{1, 2, 3, 4, 5})
	require.NoError(t, err)
	require.Len(t, ended, 1, "the live run 1 and the new 3 and 4 have not ended")
	require.Equal(t, failed.Run, ended[0].Run)
	require.Equal(t, reconcile.StateFailed, ended[0].State)
	require.Equal(t, reconcile.Over, reconcile.Reservable(ended))
	_ = live
	_, err = s.Ensure(ctx, []reconcile.NewReservation{{Run: reconcile.RunID{Cluster: "other", JobID: 9}}})
	require.ErrorContains(t, err, "serves cluster c")
}

// A run that is over never gets another reservation; one let go while its job was held does.
func TestStoreRunOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	held := reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: 1}, Request: request.Request{Pool: "p", GPUs: 1}}
	r, _ := ensure(t, s, held)
	_, err := s.Unwant(ctx, r.ID, "job 1 is held", false)
	require.NoError(t, err)
	move(t, s, &r, reconcile.EventUnwanted, "job 1 is held")
	again, created := ensure(t, s, held)
	require.True(t, created, "a run released while held is reserved again")

	// Over: the epilog names the run, and the run's latest reservation records it.
	_, err = s.UnwantRun(ctx, held.Run, "job 1 run 0 finished", true)
	require.NoError(t, err)
	again, err = s.Get(ctx, again.ID)
	require.NoError(t, err)
	move(t, s, &again, reconcile.EventUnwanted, again.Spec.WantReason)
	last, created := ensure(t, s, held)
	require.False(t, created, "a run that is over is never reserved again")
	require.Equal(t, again.ID, last.ID)
	require.True(t, last.Spec.RunOver)
	first, err := s.Get(ctx, r.ID)
	require.NoError(t, err)
	require.False(t, first.Spec.RunOver, "only the run's latest reservation records it")
	_, err = s.UnwantRun(ctx, reconcile.RunID{Cluster: "c", JobID: 404}, "x", true)
	require.ErrorIs(t, err, reconcile.ErrNotFound)
}

// The database's guard of "may this run be reserved again?" (blocksNew; reconcile.Reservable decides) is the
// predicate of the partial unique indexes that enforce it: PostgreSQL prints them the same way.
func TestBlocksNewIsTheIndexPredicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStores(t, "c") // the owner: it creates a scratch index
	var index string
	require.NoError(t, s.pool.QueryRow(ctx, sqlIndexPredicate).Scan(&index))
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `CREATE INDEX juice_scratch ON juice_reservations (cluster) WHERE `+blocksNew)
	require.NoError(t, err)
	var ours string
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_get_expr(indpred, indrelid) FROM pg_index
		WHERE indexrelid = 'juice_scratch'::regclass`).Scan(&ours))
	require.Equal(t, index, ours)
	var element string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT pg_get_expr(indpred, indrelid) FROM pg_index
		WHERE indexrelid = 'juice_reservations_live_element'::regclass`).Scan(&element))
	require.Equal(t, index, element, "an array element's index is built on the same predicate")
}

// The database's guard (blocksNew) blocks a new reservation exactly where reconcile.Reservable, which decides,
// says the run is not free: for every state, with and without run_over.
func TestBlocksNewIsReservable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := newStores(t, "c")
	for _, state := range reconcile.States {
		for _, over := range []bool{false, true} {
			var blocks bool
			require.NoError(t, s.pool.QueryRow(ctx, `SELECT `+blocksNew+` FROM (SELECT $1::text AS state, $2::boolean AS run_over) r`,
				string(state), over).Scan(&blocks))
			standing := reconcile.Reservable([]reconcile.Tracked{{State: state, RunOver: over}})
			require.Equal(t, standing != reconcile.Free, blocks, "%s, run over %v: Reservable says %s", state, over, standing)
		}
	}
}

// Two clusters on one database: each store sees and changes only its own cluster's rows.
func TestStoresOfTwoClustersShareADatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, a := newStores(t, "a")
	b := New(a.Pool(), "b")
	req := request.Request{Pool: "p", GPUs: 1}
	ra, _, err := a.EnsureRun(ctx, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "a", JobID: 1}, Request: req})
	require.NoError(t, err)
	rb, _, err := b.EnsureRun(ctx, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "b", JobID: 1}, Request: req})
	require.NoError(t, err)
	require.NotEqual(t, ra.ID, rb.ID, "the same job id in two clusters is two runs")

	for _, c := range []struct {
		s     *Store
		mine  uuid.UUID
		other uuid.UUID
	}{{a, ra.ID, rb.ID}, {b, rb.ID, ra.ID}} {
		open, err := c.s.Open(ctx)
		require.NoError(t, err)
		require.Len(t, open, 1)
		require.Equal(t, c.mine, open[0].ID)
		_, err = c.s.Get(ctx, c.other)
		require.ErrorIs(t, err, reconcile.ErrNotFound)
		changed, err := c.s.Unwant(ctx, c.other, "not mine", true)
		require.NoError(t, err)
		require.False(t, changed)
		_, err = c.s.Sealed(ctx, c.other)
		require.True(t, errors.Is(err, reconcile.ErrNotFound))
		sum, err := c.s.Summary(ctx)
		require.NoError(t, err)
		require.Equal(t, []Count{{"p", reconcile.StatePending, 1}}, sum)
		jobs, err := c.s.ForJob(ctx, 1)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
	}
	other := rb
	require.ErrorIs(t, a.SaveStatus(ctx, &other, reconcile.Transition{}), reconcile.ErrConflict)
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

func TestParseNotification(t *testing.T) {
	id := uuid.New()
	n, ok := ParseNotification("c1 " + id.String() + " status ready")
	require.True(t, ok)
	require.Equal(t, Notification{Cluster: "c1", ID: id, Kind: KindStatus, State: reconcile.StateReady}, n)
	n, ok = ParseNotification("c1 " + id.String() + " spec")
	require.True(t, ok)
	require.Equal(t, Notification{Cluster: "c1", ID: id, Kind: KindSpec}, n)
	for _, bad := range []string{"", "c1", "c1 not-a-uuid status", "c1 " + id.String(), "c1 " + id.String() + " status ready x"} {
		_, ok := ParseNotification(bad)
		require.False(t, ok, bad)
	}
}

// Every write announces itself, with the kind that says who must look.
func TestWritesAreAnnounced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	conn, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN "+NotifyChannel)
	require.NoError(t, err)
	next := func() Notification {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		raw, err := conn.Conn().WaitForNotification(wctx)
		require.NoError(t, err)
		n, ok := ParseNotification(raw.Payload)
		require.True(t, ok, raw.Payload)
		return n
	}
	r, _ := ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: 1}, Request: request.Request{Pool: "p", GPUs: 1}})
	require.Equal(t, Notification{Cluster: "c", ID: r.ID, Kind: KindCreated}, next())
	move(t, s, &r, reconcile.EventRequest, "asking")
	require.Equal(t, Notification{Cluster: "c", ID: r.ID, Kind: KindStatus, State: reconcile.StateRequesting}, next())
	require.NoError(t, s.ObserveJob(ctx, r.ID, "RUNNING", "None"))
	require.Equal(t, Notification{Cluster: "c", ID: r.ID, Kind: KindObserved}, next())
	_, err = s.Unwant(ctx, r.ID, "ended", true)
	require.NoError(t, err)
	require.Equal(t, Notification{Cluster: "c", ID: r.ID, Kind: KindSpec}, next())
}

// Retention: Prune deletes the reservations of this cluster that ended before the cutoff, with their events, and
// nothing else: not an open one however old, not one that ended after the cutoff, not another cluster's.
func TestPruneDeletesEndedRunsBeforeTheCutoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner, s := newStores(t, "c")
	other := New(s.pool, "other")
	req := request.Request{Pool: "p", GPUs: 1}
	mk := func(st *Store, job uint32, evs ...reconcile.Event) reconcile.Reservation {
		r, _ := ensure(t, st, reconcile.NewReservation{Run: reconcile.RunID{Cluster: st.Cluster(), JobID: job}, Request: req})
		for _, ev := range evs {
			move(t, st, &r, ev, "test")
		}
		return r
	}
	oldReleased := mk(s, 1, reconcile.EventUnwanted)
	oldFailed := mk(s, 2, reconcile.EventFail)
	oldOpen := mk(s, 3, reconcile.EventRequest)
	recent := mk(s, 4, reconcile.EventUnwanted)
	otherOld := mk(other, 5, reconcile.EventUnwanted)
	// Age all but the recent one by 40 days (as the owner: the test's own hand, not the controller's).
	_, err := owner.pool.Exec(ctx, `UPDATE juice_reservations SET updated_at = now() - interval '40 days' WHERE id = ANY($1)`,
		[]uuid.UUID{oldReleased.ID, oldFailed.ID, oldOpen.ID, otherOld.ID})
	require.NoError(t, err)
	eventsOf := func(id uuid.UUID) int {
		var n int
		require.NoError(t, owner.pool.QueryRow(ctx, `SELECT count(*) FROM juice_events WHERE reservation_id = $1`, id).Scan(&n))
		return n
	}
	require.NotZero(t, eventsOf(oldReleased.ID))

	n, err := s.Prune(ctx, time.Now().Add(-30*24*time.Hour))
	require.NoError(t, err, "the runtime role may prune")
	require.Equal(t, int64(2), n)
	for _, gone := range []uuid.UUID{oldReleased.ID, oldFailed.ID} {
		_, err := s.Get(ctx, gone)
		require.ErrorIs(t, err, reconcile.ErrNotFound)
		require.Zero(t, eventsOf(gone), "its events went with it")
	}
	for _, kept := range []reconcile.Reservation{oldOpen, recent} {
		_, err := s.Get(ctx, kept.ID)
		require.NoError(t, err, "job %d is kept", kept.Run.JobID)
		require.NotZero(t, eventsOf(kept.ID))
	}
	_, err = other.Get(ctx, otherOld.ID)
	require.NoError(t, err, "another cluster's history is its own controller's to prune")
	n, err = s.Prune(ctx, time.Now().Add(-30*24*time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "pruning again finds nothing")
}

// Prune works through more rows than one batch.
func TestPruneTakesEveryBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner, s := newStores(t, "c")
	_, err := owner.pool.Exec(ctx, `INSERT INTO juice_reservations (id, cluster, job_id, run, request, pool, gpus, state, wanted, updated_at)
		SELECT gen_random_uuid(), 'c', g, 0, 'juice:v1:pool=p,gpus=1', 'p', 1, 'released', false, now() - interval '40 days'
		FROM generate_series(1, $1::int) g`, pruneBatch*2+17)
	require.NoError(t, err)
	n, err := s.Prune(ctx, time.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(pruneBatch*2+17), n)
}

// Several moves of one pass are one write: the row takes the last state, every move is an event, in order.
func TestSaveStatusWritesEveryMoveAsAnEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := newStores(t, "c")
	r, _ := ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: 11}, Request: request.Request{Pool: "p", GPUs: 1}})
	move(t, s, &r, reconcile.EventRequest, "asking")
	var ts []reconcile.Transition
	for _, ev := range []reconcile.Event{reconcile.EventQueued, reconcile.EventActive} {
		tr, err := reconcile.Apply(&r, ev, "then "+string(ev), time.Now())
		require.NoError(t, err)
		ts = append(ts, tr)
	}
	version := r.Status.Version
	require.NoError(t, s.SaveStatus(ctx, &r, ts...))
	require.Equal(t, version+1, r.Status.Version, "one write")
	got, err := s.Get(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.StateReady, got.Status.State)
	events, err := s.Events(ctx, r.ID)
	require.NoError(t, err)
	require.Len(t, events, 4, "created, then the three moves")
	require.Equal(t, []reconcile.State{reconcile.StateRequesting, reconcile.StateWaiting, reconcile.StateReady},
		[]reconcile.State{events[1].To, events[2].To, events[3].To})
	require.Equal(t, reconcile.StateWaiting, events[3].From)
	require.Error(t, s.SaveStatus(ctx, &r), "a write without a move")
}

// Tracked reads of the open runs what the poller compares, the same as the full rows say.
func TestTrackedIsWhatOpenSaysOfThePollersFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := newStores(t, "c")
	a, _ := ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: 21, Run: 1}, Request: request.Request{Pool: "p", GPUs: 1}})
	ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", ArrayJobID: 30, ArrayTaskID: 4}, Request: request.Request{Pool: "p", GPUs: 1}})
	require.NoError(t, s.ObserveJob(ctx, a.ID, "RUNNING", "None"))
	move(t, s, &a, reconcile.EventRequest, "asking")
	open, err := s.Open(ctx)
	require.NoError(t, err)
	tracked, err := s.Tracked(ctx)
	require.NoError(t, err)
	require.Len(t, tracked, len(open))
	for i := range open {
		require.Equal(t, open[i].ID, tracked[i].ID)
		require.Equal(t, open[i].Run, tracked[i].Run)
		require.Equal(t, open[i].Status.State, tracked[i].State)
		require.Equal(t, open[i].Spec.JobState, tracked[i].JobState)
		require.Equal(t, open[i].Spec.JobReason, tracked[i].JobReason)
	}
	require.Equal(t, reconcile.StateRequesting, tracked[0].State)
	require.Equal(t, "RUNNING", tracked[0].JobState)
	require.True(t, tracked[1].Run.Unbound())
}

// RunningReady reads, as Tracked reads them, only the open runs whose session is ready and whose job Slurm runs:
// the stranded watch's runs, without the rest of the queue.
func TestRunningReadyReadsOnlyReadyRunsOfRunningJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := newStores(t, "c")
	mk := func(job uint32, jobState string, events ...reconcile.Event) reconcile.Reservation {
		r, _ := ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: job}, Request: request.Request{Pool: "p", GPUs: 1}})
		require.NoError(t, s.ObserveJob(ctx, r.ID, jobState, "None"))
		for _, ev := range events {
			move(t, s, &r, ev, string(ev))
		}
		return r
	}
	toReady := []reconcile.Event{reconcile.EventRequest, reconcile.EventQueued, reconcile.EventActive}
	want := mk(1, "RUNNING", toReady...)
	mk(2, "PENDING", toReady...)                                                         // ready ahead of its job
	mk(3, "RUNNING", reconcile.EventRequest, reconcile.EventQueued)                      // still waiting for its session
	mk(4, "COMPLETING", toReady...)                                                      // its job is ending
	mk(5, "RUNNING", append(toReady, reconcile.EventUnwanted, reconcile.EventClosed)...) // released
	got, err := s.RunningReady(ctx)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, want.ID, got[0].ID)
	require.Equal(t, reconcile.StateReady, got[0].State)
	require.Equal(t, "RUNNING", got[0].JobState)
	require.Equal(t, uint32(1), got[0].Run.JobID)
	require.True(t, reconcile.WantsFile(got[0]))
}

// YieldPool lets go, as the runtime role, exactly the reservations of the pool whose jobs Slurm shows pending and
// that ask for or hold a session, without ending their runs; the in-memory store does the same.
func TestYieldPoolLetsGoPendingJobsThatAskInThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := newStores(t, "c")
	mem := &memstore.Store{}
	mk := func(job uint32, pool, jobState string, events ...reconcile.Event) uuid.UUID {
		r, _ := ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: job},
			Request: request.Request{Pool: pool, GPUs: 1}, JobState: jobState, JobReason: "Priority"})
		for _, ev := range events {
			move(t, s, &r, ev, "then "+string(ev))
		}
		got, err := s.Get(ctx, r.ID)
		require.NoError(t, err)
		mem.Put(got)
		return r.ID
	}
	asking := mk(1, "p", "PENDING", reconcile.EventRequest)
	queued := mk(2, "p", "PENDING", reconcile.EventRequest, reconcile.EventQueued)
	holding := mk(3, "p", "PENDING", reconcile.EventRequest, reconcile.EventQueued, reconcile.EventActive)
	notAsked := mk(4, "p", "PENDING")
	started := mk(5, "p", "RUNNING", reconcile.EventRequest, reconcile.EventQueued, reconcile.EventActive)
	otherPool := mk(6, "q", "PENDING", reconcile.EventRequest)

	for name, st := range map[string]reconcile.Store{"store": s, "memstore": mem} {
		n, err := st.YieldPool(ctx, "p", "yields pool p to job 5")
		require.NoError(t, err, name)
		require.Equal(t, 3, n, name)
		for _, id := range []uuid.UUID{asking, queued, holding} {
			r, err := st.Get(ctx, id)
			require.NoError(t, err)
			require.False(t, r.Spec.Wanted, "%s: job %d", name, r.Run.JobID)
			require.False(t, r.Spec.RunOver, "%s: job %d", name, r.Run.JobID)
			require.Equal(t, "yields pool p to job 5", r.Spec.WantReason, name)
		}
		for _, id := range []uuid.UUID{notAsked, started, otherPool} {
			r, err := st.Get(ctx, id)
			require.NoError(t, err)
			require.True(t, r.Spec.Wanted, "%s: job %d", name, r.Run.JobID)
		}
		n, err = st.YieldPool(ctx, "p", "again")
		require.NoError(t, err)
		require.Zero(t, n, "%s: what was let go is not let go again", name)
	}
}

// A run Slurm started never looks pending again: a listing taken before the start and applied after the prolog
// recorded it writes no PENDING over CONFIGURING or RUNNING; other changes are written.
func TestObserveJobNeverMakesAStartedRunPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := newStores(t, "c")
	r, _ := ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: 41},
		Request: request.Request{Pool: "p", GPUs: 1}, JobState: "PENDING", JobReason: "Priority"})
	state := func() string {
		got, err := s.Get(ctx, r.ID)
		require.NoError(t, err)
		return got.Spec.JobState
	}
	require.NoError(t, s.ObserveJob(ctx, r.ID, "CONFIGURING", ""))
	require.Equal(t, "CONFIGURING", state())
	require.NoError(t, s.ObserveJob(ctx, r.ID, "PENDING", "Priority"))
	require.Equal(t, "CONFIGURING", state(), "a stale listing")
	require.NoError(t, s.ObserveJob(ctx, r.ID, "RUNNING", "None"))
	require.Equal(t, "RUNNING", state())
	require.NoError(t, s.ObserveJob(ctx, r.ID, "PENDING", "None"))
	require.Equal(t, "RUNNING", state())
	require.NoError(t, s.ObserveJob(ctx, r.ID, "COMPLETING", "None"))
	require.Equal(t, "COMPLETING", state())
}

// Slurm's start and end of a run are written once each, on a final reservation too (the epilog released it
// before the poller saw the job end); Tracked and Ended say which are known, so the poller writes each once.
func TestObserveTimesWritesEachOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := newStores(t, "c")
	r, _ := ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: 42},
		Request: request.Request{Pool: "p", GPUs: 1}, JobState: "RUNNING"})
	known := func() (bool, bool) {
		open, err := s.Tracked(ctx)
		require.NoError(t, err)
		ended, err := s.Ended(ctx, []uint32{42})
		require.NoError(t, err)
		for _, tr := range append(open, ended...) {
			if tr.ID == r.ID {
				return tr.HasStart, tr.HasEnd
			}
		}
		t.Fatal("not listed")
		return false, false
	}
	start := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	require.NoError(t, s.ObserveTimes(ctx, r.ID, start, time.Time{}))
	hasStart, hasEnd := known()
	require.True(t, hasStart)
	require.False(t, hasEnd)
	_, err := s.Pool().Exec(ctx, `UPDATE juice_reservations SET state = 'released' WHERE id = $1`, r.ID)
	require.NoError(t, err)
	require.NoError(t, s.ObserveTimes(ctx, r.ID, start.Add(time.Hour), start.Add(time.Minute)))
	hasStart, hasEnd = known()
	require.True(t, hasStart && hasEnd, "the end, on the released reservation")
	require.NoError(t, s.ObserveTimes(ctx, r.ID, start.Add(time.Hour), start.Add(time.Hour)))
	var got [2]time.Time
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT job_start, job_end FROM juice_reservations WHERE id = $1`, r.ID).Scan(&got[0], &got[1]))
	require.True(t, got[0].Equal(start) && got[1].Equal(start.Add(time.Minute)), "each written once: %v", got)
}

// A pool's queued runs (QueuedIn) and whether any run but one waits for its GPUs (PoolWaits): wanted runs not
// served yet, of that pool only.
func TestQueuedAndWaitingRunsOfAPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := newStores(t, "c")
	add := func(job uint32, pool string) reconcile.Reservation {
		r, _ := ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: job},
			Request: request.Request{Pool: pool, GPUs: 1}, UserName: "u"})
		return r
	}
	held := add(1, "p")
	queued := add(2, "p")
	elsewhere := add(3, "q")
	for _, r := range []*reconcile.Reservation{&held, &queued, &elsewhere} {
		move(t, s, r, reconcile.EventRequest, "asking")
		r.Status.SessionID = "s-" + r.ID.String()
		move(t, s, r, reconcile.EventQueued, "queued")
	}
	held.Status.Sealed, held.Status.ReadyAt = []byte{1}, time.Now()
	move(t, s, &held, reconcile.EventActive, "active")

	later := add(4, "p")
	move(t, s, &later, reconcile.EventRequest, "asking")
	later.Status.SessionID = "s-later"
	move(t, s, &later, reconcile.EventQueued, "queued")
	ids, err := s.QueuedIn(ctx, "p", 10)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{queued.ID, later.ID}, ids, "oldest first")
	ids, err = s.QueuedIn(ctx, "p", 1)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{queued.ID}, ids, "at most max")
	_, err = s.Unwant(ctx, later.ID, "cancelled", true)
	require.NoError(t, err)
	waits, err := s.PoolWaits(ctx, "p", held.ID)
	require.NoError(t, err)
	require.True(t, waits, "job 2 waits for pool p")
	waits, err = s.PoolWaits(ctx, "p", queued.ID)
	require.NoError(t, err)
	require.False(t, waits, "only job 2 waits, and it is the one asking")
	waits, err = s.PoolWaits(ctx, "r", held.ID)
	require.NoError(t, err)
	require.False(t, waits)

	_, err = s.Unwant(ctx, queued.ID, "cancelled", true)
	require.NoError(t, err)
	ids, err = s.QueuedIn(ctx, "p", 10)
	require.NoError(t, err)
	require.Empty(t, ids, "a run no longer wanted is not hastened")
	waits, err = s.PoolWaits(ctx, "p", held.ID)
	require.NoError(t, err)
	require.False(t, waits)
}

// The hand-off's queries find the runs reconcile.MayTake decides on, and HandOver writes both runs or neither.
func TestHandoffQueriesAndHandOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := newStores(t, "c")
	add := func(job uint32, user, account string, gpus int) reconcile.Reservation {
		r, _ := ensure(t, s, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: job},
			Request: request.Request{Pool: "p", GPUs: gpus}, UserName: user, Account: account, JobState: "PENDING"})
		return r
	}
	// ready moves r to ready on session sid, sealed.
	ready := func(r *reconcile.Reservation, sid string) {
		move(t, s, r, reconcile.EventRequest, "asking")
		r.Status.SessionID = sid
		move(t, s, r, reconcile.EventQueued, "queued")
		r.Status.Sealed, r.Status.ReadyAt = []byte{1}, time.Now()
		move(t, s, r, reconcile.EventActive, "active")
	}
	giver := add(1, "alice", "physics", 2)
	ready(&giver, "s-1")

	add(2, "bob", "physics", 2)   // another user
	add(3, "alice", "chem", 2)    // another account
	add(4, "alice", "physics", 1) // another request
	pending := add(5, "alice", "physics", 2)
	started := add(6, "alice", "physics", 2)
	require.NoError(t, s.ObserveJob(ctx, started.ID, "CONFIGURING", "None"))
	got, err := s.HandoffTaker(ctx, &giver)
	require.NoError(t, err)
	require.Equal(t, started.ID, got.ID, "a started run first, though younger")
	_, err = s.Unwant(ctx, started.ID, "cancelled", true)
	require.NoError(t, err)
	got, err = s.HandoffTaker(ctx, &giver)
	require.NoError(t, err)
	require.Equal(t, pending.ID, got.ID, "not one that is no longer wanted")
	asking, err := s.LikeAsking(ctx, &giver, 2)
	require.NoError(t, err)
	require.Empty(t, asking)
	askedRun := add(8, "alice", "physics", 2)
	move(t, s, &askedRun, reconcile.EventRequest, "asking")
	asking, err = s.LikeAsking(ctx, &giver, 2)
	require.NoError(t, err)
	require.Len(t, asking, 1, "job 8 asked for a session of its own")
	require.Equal(t, askedRun.ID, asking[0].ID)
	later := add(19, "alice", "physics", 2)
	move(t, s, &later, reconcile.EventRequest, "asking")
	asking, err = s.LikeAsking(ctx, &giver, 1)
	require.NoError(t, err)
	require.Len(t, asking, 1, "at most max")
	require.Equal(t, askedRun.ID, asking[0].ID, "the oldest first")
	_, err = s.Unwant(ctx, later.ID, "cancelled", true)
	require.NoError(t, err)
	_, err = s.Unwant(ctx, askedRun.ID, "cancelled", true)
	require.NoError(t, err)
	// A started run waiting with its own session queued may take one too, before a run not started; one whose job
	// has not started may not.
	queued := add(10, "alice", "physics", 2)
	move(t, s, &queued, reconcile.EventRequest, "asking")
	queued.Status.SessionID = "s-10"
	move(t, s, &queued, reconcile.EventQueued, "queued")
	got, err = s.HandoffTaker(ctx, &giver)
	require.NoError(t, err)
	require.Equal(t, pending.ID, got.ID, "job 10 waits in the queue, but its job has not started")
	require.NoError(t, s.ObserveJob(ctx, queued.ID, "RUNNING", "None"))
	got, err = s.HandoffTaker(ctx, &giver)
	require.NoError(t, err)
	require.Equal(t, queued.ID, got.ID, "a started run waiting with its own session queued")
	_, err = s.Unwant(ctx, queued.ID, "cancelled", true)
	require.NoError(t, err)

	lingers, err := s.HandoffLingers(ctx, &pending, time.Minute)
	require.NoError(t, err)
	require.False(t, lingers, "the giver's run is still wanted")
	_, err = s.Unwant(ctx, giver.ID, "held", false)
	require.NoError(t, err)
	lingers, err = s.HandoffLingers(ctx, &pending, time.Minute)
	require.NoError(t, err)
	require.False(t, lingers, "the giver's run is not over")
	_, err = s.Unwant(ctx, giver.ID, "ended", true)
	require.NoError(t, err)
	lingers, err = s.HandoffLingers(ctx, &pending, time.Minute)
	require.NoError(t, err)
	require.True(t, lingers, "the giver's run ended, its end not taken up yet")
	giver, err = s.Get(ctx, giver.ID)
	require.NoError(t, err)
	move(t, s, &giver, reconcile.EventUnwanted, "ended")
	lingers, err = s.HandoffLingers(ctx, &pending, time.Minute)
	require.NoError(t, err)
	require.True(t, lingers)
	other := add(7, "bob", "physics", 2)
	lingers, err = s.HandoffLingers(ctx, &other, time.Minute)
	require.NoError(t, err)
	require.False(t, lingers, "not for another user's run")
	// bob's run released by an administrator is never waited for.
	bobs := add(9, "bob", "physics", 2)
	ready(&bobs, "s-9")
	_, err = s.Unwant(ctx, bobs.ID, reconcile.AdminReleased, true)
	require.NoError(t, err)
	lingers, err = s.HandoffLingers(ctx, &other, time.Minute)
	require.NoError(t, err)
	require.False(t, lingers, "an administrator's release is not handed on")
	time.Sleep(20 * time.Millisecond)
	lingers, err = s.HandoffLingers(ctx, &pending, 10*time.Millisecond)
	require.NoError(t, err)
	require.False(t, lingers, "not once the wait is over")

	// A taker moved since it was read: neither run is written.
	stale := pending
	move(t, s, &pending, reconcile.EventWait, "waiting for the user's GPUs")
	tg, err := reconcile.Apply(&giver, reconcile.EventHanded, "handed", time.Now())
	require.NoError(t, err)
	tt, err := reconcile.Apply(&stale, reconcile.EventTaken, "taken", time.Now())
	require.NoError(t, err)
	stale.Status.SessionID = "s-1"
	require.ErrorIs(t, s.HandOver(ctx, &giver, &stale, []reconcile.Transition{tg}, tt), reconcile.ErrConflict)
	g, err := s.Get(ctx, giver.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.StateReleasing, g.Status.State, "the giver's write was rolled back")

	tt, err = reconcile.Apply(&pending, reconcile.EventTaken, "taken", time.Now())
	require.NoError(t, err)
	pending.Status.SessionID, pending.Status.Sealed, pending.Status.ReadyAt = "s-1", []byte{2}, time.Now()
	pending.Status.SealedJobID = 5
	require.NoError(t, s.HandOver(ctx, &giver, &pending, []reconcile.Transition{tg}, tt))
	g, err = s.Get(ctx, giver.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.StateReleased, g.Status.State)
	require.Equal(t, "s-1", g.Status.SessionID, "a released giver still names the session it handed on")
	live, sealed, err := s.LiveRunSealed(ctx, pending.Run)
	require.NoError(t, err)
	require.Equal(t, reconcile.StateReady, live.Status.State)
	require.Equal(t, []byte{2}, sealed)
	require.True(t, live.SealedFor())
	holder, err := s.Holding(ctx, "s-1")
	require.NoError(t, err)
	require.Equal(t, pending.ID, holder.ID)
	_, err = s.Holding(ctx, "s-none")
	require.ErrorIs(t, err, reconcile.ErrNotFound)
	evs, err := s.Events(ctx, pending.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.EventTaken, evs[len(evs)-1].Event)
}
