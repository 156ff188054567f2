// Package store keeps juice-slurm's state in PostgreSQL: every reservation with its spec and status, its
// history, and the leader lease. All SQL is in sql.go, the schema in migrations/. A Store serves one cluster;
// several clusters, and any number of replicas, may share one database.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// Kind says which half of a reservation a notification is about: who needs to look at it.
type Kind string

const (
	KindCreated  Kind = "created"  // an observer created it: the reconciler starts on it
	KindSpec     Kind = "spec"     // an observer changed what is wanted: the reconciler acts on it
	KindObserved Kind = "observed" // Slurm's view of the job changed: the job actor looks at it
	KindStatus   Kind = "status"   // the reconciler moved it: waiting hooks and the job actor look at it
)

// A Notification is one payload on NotifyChannel.
type Notification struct {
	Cluster string
	ID      uuid.UUID
	Kind    Kind
	// State is the state a status change moved the reservation to; empty for the other kinds.
	State reconcile.State
}

// ParseNotification reads a payload on NotifyChannel.
func ParseNotification(payload string) (Notification, bool) {
	f := strings.Fields(payload)
	if len(f) < 3 || len(f) > 4 {
		return Notification{}, false
	}
	id, err := uuid.Parse(f[1])
	if err != nil {
		return Notification{}, false
	}
	n := Notification{Cluster: f[0], ID: id, Kind: Kind(f[2])}
	if len(f) == 4 {
		n.State = reconcile.State(f[3])
	}
	return n, true
}

// Count is one cell of the status table.
type Count struct {
	Pool  string
	State reconcile.State
	N     int
}

//go:embed migrations/*.sql
var migrations embed.FS

// Store is the PostgreSQL store of one cluster.
type Store struct {
	pool    *pgxpool.Pool
	cluster string
}

var _ reconcile.Store = (*Store)(nil)

// New returns the store of cluster on pool; call Migrate before use.
func New(pool *pgxpool.Pool, cluster string) *Store { return &Store{pool: pool, cluster: cluster} }

// Cluster is the cluster this store serves.
func (s *Store) Cluster() string { return s.cluster }

// Pool returns the underlying pool, for LISTEN.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// KnownSchema is the newest schema version this binary knows: its highest migration.
func KnownSchema() int {
	entries, err := migrations.ReadDir("migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	known := 0
	for _, e := range entries {
		if v, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0]); err == nil && v > known {
			known = v
		}
	}
	return known
}

// SchemaVersion is the newest migration applied to the database; 0 when none is.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var has bool
	if err := s.pool.QueryRow(ctx, sqlHasMigrations).Scan(&has); err != nil || !has {
		if err != nil {
			return 0, fmt.Errorf("read the schema version: %w", err)
		}
		return 0, nil
	}
	var v int
	if err := s.pool.QueryRow(ctx, sqlSchemaVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	return v, nil
}

// ErrSchemaNewer says the database was migrated by a newer juice-slurm: this binary would misread it.
var ErrSchemaNewer = errors.New("the database schema is newer than this binary knows")

// ErrSchemaOlder says the database lacks migrations this binary needs: run `juice-slurm migrate`.
var ErrSchemaOlder = errors.New("the database schema is older than this binary needs")

// CheckSchema says whether this binary can run on the database as it is: nil when its schema is exactly the one
// it knows. The controller runs as a role without DDL rights and never migrates: `juice-slurm migrate`, run as
// the owner role, does.
func (s *Store) CheckSchema(ctx context.Context) error {
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	switch known := KnownSchema(); {
	case v > known:
		return fmt.Errorf("%w: the database is at version %d, this binary knows up to %d: upgrade juice-slurm", ErrSchemaNewer, v, known)
	case v < known:
		return fmt.Errorf("%w: the database is at version %d, this binary needs %d: run `juice-slurm migrate` as the owner role", ErrSchemaOlder, v, known)
	}
	return nil
}

// GrantRuntime gives role what the controller and the admin commands need at run time, and no more: reading and
// writing the rows of juice-slurm's tables (and their sequences). It cannot create, alter or drop anything.
// Run by `juice-slurm migrate` as the tables' owner after migrating.
func (s *Store) GrantRuntime(ctx context.Context, role string) error {
	id := pgx.Identifier{role}.Sanitize()
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlOwnTables)
		if err != nil {
			return err
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		var schema string
		if err := tx.QueryRow(ctx, sqlCurrentSchema).Scan(&schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "GRANT USAGE ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" TO "+id); err != nil {
			return fmt.Errorf("grant to role %q: %w", role, err)
		}
		for _, t := range tables {
			if _, err := tx.Exec(ctx, "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "+pgx.Identifier{t}.Sanitize()+" TO "+id); err != nil {
				return fmt.Errorf("grant %s to role %q: %w", t, role, err)
			}
		}
		rows, err = tx.Query(ctx, sqlOwnSequences)
		if err != nil {
			return err
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, q := range seqs {
			if _, err := tx.Exec(ctx, "GRANT USAGE, SELECT ON SEQUENCE "+pgx.Identifier{q}.Sanitize()+" TO "+id); err != nil {
				return fmt.Errorf("grant %s to role %q: %w", q, role, err)
			}
		}
		return nil
	})
}

// Migrate applies the embedded migrations that the database lacks, each in its own transaction, in order. It
// needs the owner role's rights (DDL); a database newer than this binary knows is left alone and refused.
func (s *Store) Migrate(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, sqlMigrationsTable); err != nil {
		return fmt.Errorf("migrate: create the migrations table: %w", err)
	}
	entries, err := migrations.ReadDir("migrations")
	if err != nil {
		return err
	}
	if v, err := s.SchemaVersion(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	} else if known := KnownSchema(); v > known {
		return fmt.Errorf("migrate: %w: the database is at version %d, this binary knows up to %d", ErrSchemaNewer, v, known)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		version, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migrate: migration file %s does not start with a number", e.Name())
		}
		body, err := migrations.ReadFile("migrations/" + e.Name())
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sqlMigrationLock); err != nil {
				return err
			}
			var done bool
			if err := tx.QueryRow(ctx, sqlMigrationApplied, version).Scan(&done); err != nil || done {
				return err
			}
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sqlMigrationRecord, version)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: apply %s: %w", e.Name(), err)
		}
	}
	return nil
}

// Ensure creates a pending, wanted reservation for each run it is given and returns the ones it created. Whether a
// run may be reserved is reconcile.Reservable's to decide before; the unique indexes on blocksNew are the guard:
// a run that has a live reservation, or is over, by the time the statement runs (another writer raced) is left as
// it is.
func (s *Store) Ensure(ctx context.Context, nrs []reconcile.NewReservation) ([]reconcile.Reservation, error) {
	if len(nrs) == 0 {
		return nil, nil
	}
	n := len(nrs)
	ids, jobs, runs, texts, pools := make([]uuid.UUID, n), make([]*int64, n), make([]int32, n), make([]string, n), make([]string, n)
	arrays, tasks := make([]*int64, n), make([]*int64, n)
	gpus, vram := make([]int32, n), make([]int64, n)
	users, parts, reasons, states, accounts := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	jobReasons := make([]string, n)
	for i, nr := range nrs {
		if nr.Run.Cluster != s.cluster {
			return nil, fmt.Errorf("ensure reservation of %s: this store serves cluster %s", nr.Run, s.cluster)
		}
		if nr.Request.VRAM > math.MaxInt64 {
			return nil, fmt.Errorf("ensure reservation of %s: VRAM %d bytes does not fit the database", nr.Run, nr.Request.VRAM)
		}
		if nr.Run.JobID == 0 && !nr.Run.Element() {
			return nil, fmt.Errorf("ensure reservation of %s: no job id, and not an array's element", nr.Run)
		}
		ids[i], jobs[i], runs[i] = uuid.New(), nullable(nr.Run.JobID), int32(nr.Run.Run)
		if nr.Run.Element() {
			arrays[i], tasks[i] = nullable(nr.Run.ArrayJobID), ptr(int64(nr.Run.ArrayTaskID))
		}
		texts[i], pools[i], gpus[i], vram[i] = nr.Request.String(), nr.Request.Pool, int32(nr.Request.GPUs), int64(nr.Request.VRAM)
		users[i], parts[i], reasons[i], states[i], accounts[i] = nr.UserName, nr.Partition, nr.Reason, nr.JobState, nr.Account
		jobReasons[i] = nr.JobReason
	}
	created, err := scanAll(s.pool.Query(ctx, sqlEnsure, s.cluster, ids, jobs, runs, texts, pools, gpus, vram, users, parts, reasons, states,
		arrays, tasks, accounts, jobReasons))
	if err != nil {
		return nil, fmt.Errorf("ensure %d reservations: %w", n, err)
	}
	return created, nil
}

// EnsureRun is Ensure for one run (a prolog's registration): it reserves the run when reconcile.Reservable says
// it may, from the run's reservations, and returns the run's reservation afterwards (the new one, or the one that
// was there) and whether it was created. An array element's run (with its job id) is first bound to the
// reservation made ahead for its element, if there is one, so that its reservations are the run's.
func (s *Store) EnsureRun(ctx context.Context, nr reconcile.NewReservation) (reconcile.Reservation, bool, error) {
	if nr.Run.Element() && nr.Run.JobID != 0 {
		if _, err := s.Bind(ctx, nr.Run); err != nil {
			return reconcile.Reservation{}, false, err
		}
	}
	// A run without a job id (an element reserved ahead) has no reservations to read here: the guard alone holds.
	records, err := s.scanTracked(s.pool.Query(ctx, sqlRunReservations, s.cluster, nullable(nr.Run.JobID), nr.Run.Run))
	if err != nil {
		return reconcile.Reservation{}, false, fmt.Errorf("reservations of %s: %w", nr.Run, err)
	}
	if reconcile.Reservable(records) == reconcile.Free {
		created, err := s.Ensure(ctx, []reconcile.NewReservation{nr})
		if err != nil {
			return reconcile.Reservation{}, false, err
		}
		if len(created) == 1 {
			return created[0], true, nil
		}
	}
	if nr.Run.Element() && nr.Run.JobID != 0 {
		// An element reserved ahead between the bind and the insert (a poller's older listing) blocked it.
		if _, err := s.Bind(ctx, nr.Run); err != nil {
			return reconcile.Reservation{}, false, err
		}
	}
	r, err := s.ForRun(ctx, nr.Run)
	return r, false, err
}

// Bind records that the array element of run (its ArrayJobID, ArrayTaskID and Run) is now the job run.JobID:
// each of the element's reservations without a job id gets it. It reports how many did.
func (s *Store) Bind(ctx context.Context, run reconcile.RunID) (int64, error) {
	if !run.Element() || run.JobID == 0 {
		return 0, fmt.Errorf("bind %s: not an array element with its job id", run)
	}
	tag, err := s.pool.Exec(ctx, sqlBind, s.cluster, int64(run.ArrayJobID), int64(run.ArrayTaskID), run.Run, int64(run.JobID))
	if err != nil {
		return 0, fmt.Errorf("bind %s: %w", run, err)
	}
	return tag.RowsAffected(), nil
}

func nullable(id uint32) *int64 {
	if id == 0 {
		return nil
	}
	return ptr(int64(id))
}

func ptr[T any](v T) *T { return &v }

// Unwant records that a reservation's run no longer wants a session, and why; over says the run itself is over
// (see Spec.RunOver). It reports whether anything changed. The reconciler hears of it and releases.
func (s *Store) Unwant(ctx context.Context, id uuid.UUID, reason string, over bool) (bool, error) {
	tag, err := s.pool.Exec(ctx, sqlUnwant, s.cluster, id, reason, over)
	if err != nil {
		return false, fmt.Errorf("unwant reservation %s: %w", id, err)
	}
	return tag.RowsAffected() > 0, nil
}

// YieldPool implements reconcile.Store: it lets go the reservations of pool whose jobs Slurm shows pending and
// that hold or ask for a session, without ending their runs, and says how many.
func (s *Store) YieldPool(ctx context.Context, pool, why string) (int, error) {
	tag, err := s.pool.Exec(ctx, sqlYieldPool, s.cluster, pool, why)
	if err != nil {
		return 0, fmt.Errorf("yield pool %s: %w", pool, err)
	}
	return int(tag.RowsAffected()), nil
}

// UnwantRun is Unwant for a run's latest reservation; ErrNotFound when the run has none.
func (s *Store) UnwantRun(ctx context.Context, run reconcile.RunID, reason string, over bool) (bool, error) {
	var id uuid.UUID
	err := s.pool.QueryRow(ctx, sqlLatestIDByRun, s.cluster, int64(run.JobID), run.Run).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("unwant %s: %w", run, reconcile.ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("unwant %s: %w", run, err)
	}
	return s.Unwant(ctx, id, reason, over)
}

// ObserveJob records what Slurm says of a reservation's job, when it changed.
func (s *Store) ObserveJob(ctx context.Context, id uuid.UUID, jobState, jobReason string) error {
	if _, err := s.pool.Exec(ctx, sqlObserveJob, s.cluster, id, jobState, jobReason); err != nil {
		return fmt.Errorf("observe the job of reservation %s: %w", id, err)
	}
	return nil
}

// ObserveTimes records when Slurm started and ended a reservation's run (zero: not known), each once.
func (s *Store) ObserveTimes(ctx context.Context, id uuid.UUID, start, end time.Time) error {
	if _, err := s.pool.Exec(ctx, sqlObserveTimes, s.cluster, id, nullTime(start), nullTime(end)); err != nil {
		return fmt.Errorf("record Slurm's times of reservation %s: %w", id, err)
	}
	return nil
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Get returns a reservation, without its sealed session file.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (reconcile.Reservation, error) {
	r, err := scanOne(s.pool.Query(ctx, sqlByID, s.cluster, id))
	if err != nil {
		return reconcile.Reservation{}, fmt.Errorf("get reservation %s: %w", id, err)
	}
	return r, nil
}

// Sealed returns a reservation's sealed session file; nil when it has none (not ready, or final).
func (s *Store) Sealed(ctx context.Context, id uuid.UUID) ([]byte, error) {
	var b []byte
	err := s.pool.QueryRow(ctx, sqlSealed, s.cluster, id).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		err = reconcile.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sealed session of %s: %w", id, err)
	}
	return b, nil
}

// SaveStatus writes r's status (read at r.Status.Version) and the transitions that led to it as events, in order,
// and announces it once. A status changed by someone else since r was read gives ErrConflict; observers' writes
// never do.
func (s *Store) SaveStatus(ctx context.Context, r *reconcile.Reservation, ts ...reconcile.Transition) error {
	return s.saveStatus(ctx, s.pool, r, ts...)
}

// rowQuerier is what a status write is made through: the pool, or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *Store) saveStatus(ctx context.Context, q rowQuerier, r *reconcile.Reservation, ts ...reconcile.Transition) error {
	if len(ts) == 0 {
		return fmt.Errorf("save reservation %s of %s: no transition", r.ID, r.Run)
	}
	st := &r.Status
	var readyAt *time.Time
	if !st.ReadyAt.IsZero() {
		readyAt = &st.ReadyAt
	}
	from, to, events, reasons := make([]string, len(ts)), make([]string, len(ts)), make([]string, len(ts)), make([]string, len(ts))
	for i, t := range ts {
		from[i], to[i], events[i], reasons[i] = string(t.From), string(t.To), string(t.Event), t.Reason
	}
	var notified string
	err := q.QueryRow(ctx, sqlSaveStatus, s.cluster, r.ID, st.Version, st.State, st.Reason, st.FailReason,
		st.Requested, st.SessionID, st.Sealed, st.AgentAddress, readyAt, from, events, reasons,
		int64(st.SealedJobID), st.MaybeOrphans, to).
		Scan(&st.UpdatedAt, &st.Version, &notified)
	if errors.Is(err, pgx.ErrNoRows) {
		err = reconcile.ErrConflict
	}
	if err != nil {
		return fmt.Errorf("save reservation %s of %s: %w", r.ID, r.Run, err)
	}
	return nil
}

// HandoffTaker returns the reservation from's session may pass to (see reconcile.Store); ErrNotFound when none.
func (s *Store) HandoffTaker(ctx context.Context, from *reconcile.Reservation) (reconcile.Reservation, error) {
	r, err := scanOne(s.pool.Query(ctx, sqlHandoffTaker, s.cluster, from.Request.Pool, from.Request.String(),
		from.UserName, from.Account, from.ID))
	if err != nil {
		return reconcile.Reservation{}, fmt.Errorf("a run to take the session of %s: %w", from.Run, err)
	}
	return r, nil
}

// HandoffLingers reports whether a run alike to to holds a session it may still pass on (see reconcile.Store).
func (s *Store) HandoffLingers(ctx context.Context, to *reconcile.Reservation, within time.Duration) (bool, error) {
	var lingers bool
	err := s.pool.QueryRow(ctx, sqlHandoffLingers, s.cluster, to.Request.Pool, to.Request.String(), to.UserName, to.Account,
		to.ID, within.Milliseconds(), reconcile.AdminReleased).Scan(&lingers)
	if err != nil {
		return false, fmt.Errorf("a session for %s to take: %w", to.Run, err)
	}
	return lingers, nil
}

// LikeAsking lists the wanted runs alike to r that wait for a session of their own (see reconcile.Store).
func (s *Store) LikeAsking(ctx context.Context, r *reconcile.Reservation, max int) ([]reconcile.Reservation, error) {
	out, err := scanAll(s.pool.Query(ctx, sqlLikeAsking, s.cluster, r.Request.Pool, r.Request.String(), r.UserName,
		r.Account, r.ID, max))
	if err != nil {
		return nil, fmt.Errorf("runs like %s waiting for their own sessions: %w", r.Run, err)
	}
	return out, nil
}

// HandOver writes both statuses of a hand-off in one transaction (see reconcile.Store): both or neither, each based
// on the version it was read at.
func (s *Store) HandOver(ctx context.Context, giver, taker *reconcile.Reservation, tg []reconcile.Transition, tt reconcile.Transition) error {
	g, t := *giver, *taker
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.saveStatus(ctx, tx, &g, tg...); err != nil {
			return err
		}
		return s.saveStatus(ctx, tx, &t, tt)
	})
	if err != nil {
		return fmt.Errorf("hand session %s from %s to %s: %w", giver.Status.SessionID, giver.Run, taker.Run, err)
	}
	// The versions and times the transaction wrote, only once it committed.
	giver.Status.UpdatedAt, giver.Status.Version = g.Status.UpdatedAt, g.Status.Version
	taker.Status.UpdatedAt, taker.Status.Version = t.Status.UpdatedAt, t.Status.Version
	return nil
}

// Holding returns the open reservation that holds session id, ErrNotFound when none: a session handed from run to
// run carries the first run's key, not its holder's.
func (s *Store) Holding(ctx context.Context, sessionID string) (reconcile.Reservation, error) {
	r, err := scanOne(s.pool.Query(ctx, sqlHolding, s.cluster, sessionID))
	if err != nil {
		return reconcile.Reservation{}, fmt.Errorf("the run holding session %s: %w", sessionID, err)
	}
	return r, nil
}

// LiveRun returns the run's reservation that blocks a new one (see blocksNew): the live one, or the one that
// failed or ended the run; ErrNotFound when the run may be reserved.
func (s *Store) LiveRun(ctx context.Context, run reconcile.RunID) (reconcile.Reservation, error) {
	r, err := scanOne(s.pool.Query(ctx, sqlLiveRun, s.cluster, int64(run.JobID), run.Run))
	if err != nil {
		return reconcile.Reservation{}, fmt.Errorf("reservation of %s: %w", run, err)
	}
	return r, nil
}

// LiveRunSealed is LiveRun with the reservation's sealed session file (nil when it has none), in one query: what a
// prolog reads first, and all it reads when the session is ready.
func (s *Store) LiveRunSealed(ctx context.Context, run reconcile.RunID) (reconcile.Reservation, []byte, error) {
	var sealed []byte
	rows, err := s.pool.Query(ctx, sqlLiveRunSealed, s.cluster, int64(run.JobID), run.Run)
	rs, err := scanRows(rows, err, &sealed)
	if err == nil && len(rs) == 0 {
		err = reconcile.ErrNotFound
	}
	if err != nil {
		return reconcile.Reservation{}, nil, fmt.Errorf("reservation of %s: %w", run, err)
	}
	return rs[0], sealed, nil
}

// ForRun returns the run's live reservation (or the one that ended it), or else its latest.
func (s *Store) ForRun(ctx context.Context, run reconcile.RunID) (reconcile.Reservation, error) {
	r, err := scanOne(s.pool.Query(ctx, sqlLiveRun, s.cluster, int64(run.JobID), run.Run))
	if errors.Is(err, reconcile.ErrNotFound) {
		r, err = scanOne(s.pool.Query(ctx, sqlLatestRun, s.cluster, int64(run.JobID), run.Run))
	}
	if err != nil {
		return reconcile.Reservation{}, fmt.Errorf("reservation of %s: %w", run, err)
	}
	return r, nil
}

// ForJob returns every reservation of a job, by run and age.
func (s *Store) ForJob(ctx context.Context, jobID uint32) ([]reconcile.Reservation, error) {
	rs, err := scanAll(s.pool.Query(ctx, sqlByJob, s.cluster, int64(jobID)))
	if err != nil {
		return nil, fmt.Errorf("reservations of job %d: %w", jobID, err)
	}
	return rs, nil
}

// ForArray returns every reservation of a job array's elements, bound to their job or not, by task id, run and
// age.
func (s *Store) ForArray(ctx context.Context, arrayJobID uint32) ([]reconcile.Reservation, error) {
	rs, err := scanAll(s.pool.Query(ctx, sqlByArray, s.cluster, int64(arrayJobID)))
	if err != nil {
		return nil, fmt.Errorf("reservations of array %d: %w", arrayJobID, err)
	}
	return rs, nil
}

// ForUser lists one user's reservations, newest first, at most limit.
func (s *Store) ForUser(ctx context.Context, user string, limit int) ([]reconcile.Reservation, error) {
	rs, err := scanAll(s.pool.Query(ctx, sqlByUser, s.cluster, user, limit))
	if err != nil {
		return nil, fmt.Errorf("reservations of user %q: %w", user, err)
	}
	return rs, nil
}

// Open lists the reservations that are not final, oldest first.
func (s *Store) Open(ctx context.Context) ([]reconcile.Reservation, error) {
	rs, err := scanAll(s.pool.Query(ctx, sqlOpen, s.cluster))
	if err != nil {
		return nil, fmt.Errorf("open reservations: %w", err)
	}
	return rs, nil
}

// OpenIDs returns the ids of the open reservations, oldest first; with all false, only those that are not
// steady (ready for a run that still wants it, with nothing else to do), which the liveness watch looks after.
// It reads ids only: a re-list of 100,000 rows costs a few MiB, not the rows.
func (s *Store) OpenIDs(ctx context.Context, all bool) ([]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, sqlOpenIDs, s.cluster, all)
	if err != nil {
		return nil, fmt.Errorf("open reservation ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("open reservation ids: %w", err)
	}
	return ids, nil
}

// Tracked returns the open reservations, oldest first, with only what the poller compares with Slurm. At 100,000
// open runs the full rows (Open) were 346 MiB of allocation per comparison, the largest part of the controller's
// memory peaks, and whole Reservation structs with only these fields filled still 284 MiB.
func (s *Store) Tracked(ctx context.Context) ([]reconcile.Tracked, error) {
	out, err := s.scanTracked(s.pool.Query(ctx, sqlTracked, s.cluster))
	if err != nil {
		return nil, fmt.Errorf("tracked reservations: %w", err)
	}
	return out, nil
}

// RunningReady returns the open runs whose session is ready and whose job Slurm shows RUNNING, read as Tracked
// reads them: the runs the stranded watch looks at (reconcile.WantsFile decides which want their file). It reads
// as many rows as there are running Juice jobs, where Tracked reads the whole queue, so that the watch can look
// every half minute.
func (s *Store) RunningReady(ctx context.Context) ([]reconcile.Tracked, error) {
	out, err := s.scanTracked(s.pool.Query(ctx, sqlRunningReady, s.cluster))
	if err != nil {
		return nil, fmt.Errorf("ready reservations of running jobs: %w", err)
	}
	return out, nil
}

func (s *Store) scanTracked(rows pgx.Rows, err error) ([]reconcile.Tracked, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.Tracked, error) {
		var r reconcile.Tracked
		var jobID, array, task *int64
		var run int
		if err := row.Scan(&r.ID, &jobID, &run, &array, &task, &r.State, &r.RunOver, &r.JobState, &r.JobReason,
			&r.HasStart, &r.HasEnd); err != nil {
			return r, err
		}
		r.Run = runID(s.cluster, jobID, run, array, task)
		return r, nil
	})
}

// Ready returns the ready reservations as the liveness watch needs them: where each one's session should be.
func (s *Store) Ready(ctx context.Context) ([]reconcile.ReadyRun, error) {
	rows, err := s.pool.Query(ctx, sqlReady, s.cluster)
	if err != nil {
		return nil, fmt.Errorf("ready reservations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.ReadyRun, error) {
		var r reconcile.ReadyRun
		var readyAt *time.Time
		err := row.Scan(&r.ID, &r.Pool, &r.SessionID, &r.AgentAddress, &readyAt)
		if readyAt != nil {
			r.ReadyAt = *readyAt
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("ready reservations: %w", err)
	}
	return out, nil
}

// Ended returns the final reservations (released or failed) of the given jobs' runs, and of their arrays'
// elements: with the open ones (Tracked), every reservation the poller's reconcile.Reservable reads of the runs it
// sees. It decides nothing.
func (s *Store) Ended(ctx context.Context, jobIDs []uint32) ([]reconcile.Tracked, error) {
	if len(jobIDs) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(jobIDs))
	for i, j := range jobIDs {
		ids[i] = int64(j)
	}
	out, err := s.scanTracked(s.pool.Query(ctx, sqlEnded, s.cluster, ids))
	if err != nil {
		return nil, fmt.Errorf("ended reservations of %d jobs: %w", len(jobIDs), err)
	}
	return out, nil
}

// Events returns a reservation's history.
func (s *Store) Events(ctx context.Context, id uuid.UUID) ([]reconcile.Transition, error) {
	rows, err := s.pool.Query(ctx, sqlEvents, s.cluster, id)
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", id, err)
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.Transition, error) {
		var t reconcile.Transition
		var ev string
		err := row.Scan(&t.From, &t.To, &ev, &t.Reason, &t.At)
		t.Event = reconcile.Event(ev)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", id, err)
	}
	return ts, nil
}

// pruneBatch bounds one DELETE of Prune, so that pruning a long history never holds many row locks at once.
const pruneBatch = 1000

// Prune deletes the reservations of this cluster that ended (released or failed) before cutoff, with their
// events, and returns how many. A run that ended is never reserved again while its reservation exists
// (reconcile.Reservable says Over); once it is pruned, Reservable no longer sees it, and a listing that still
// showed its job would reserve it anew: so the retention must exceed the cluster's longest job time limit (it is
// 30 days by default). The retention is the only thing Prune decides.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, sqlPrune, s.cluster, cutoff, pruneBatch)
		if err != nil {
			return total, fmt.Errorf("prune reservations that ended before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

// HeldGPUs counts the GPUs user holds or is getting in pool (see reconcile.Store).
func (s *Store) HeldGPUs(ctx context.Context, pool, user string) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, sqlHeldGPUs, s.cluster, pool, user).Scan(&n); err != nil {
		return 0, fmt.Errorf("GPUs user %q holds in pool %s: %w", user, pool, err)
	}
	return n, nil
}

// QueuedIn returns the pool's oldest wanted reservations whose sessions wait at the Juice Controller, at most max.
func (s *Store) QueuedIn(ctx context.Context, pool string, max int) ([]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, sqlQueuedIn, s.cluster, pool, max)
	if err != nil {
		return nil, fmt.Errorf("queued runs of pool %s: %w", pool, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("queued runs of pool %s: %w", pool, err)
	}
	return ids, nil
}

// PoolWaits reports whether a run other than reservation except's waits for GPUs in pool: one wanted and not
// served yet.
func (s *Store) PoolWaits(ctx context.Context, pool string, except uuid.UUID) (bool, error) {
	var waits bool
	if err := s.pool.QueryRow(ctx, sqlPoolWaits, s.cluster, pool, except).Scan(&waits); err != nil {
		return false, fmt.Errorf("does a run wait for pool %s: %w", pool, err)
	}
	return waits, nil
}

// UsageBy is what juice-slurm report groups by.
type UsageBy string

const (
	ByUser    UsageBy = "user"
	ByAccount UsageBy = "account"
	ByPool    UsageBy = "pool"
)

// usageColumns are the columns a report may group by: the only text put into sqlUsage.
var usageColumns = map[UsageBy]string{ByUser: "user_name", ByAccount: "account", ByPool: "pool"}

// Usage is one group's use of one pool's GPUs within a report's period (see sqlUsage).
type Usage struct {
	// Key is the user, account or pool; empty when the run's was not known (an account before migration 6).
	Key  string
	Pool string
	// Runs counts the runs whose holding overlaps the period (0: only charged).
	Runs int
	// GPUSeconds is GPUs × seconds held, within the period.
	GPUSeconds float64
	// SliceByteSeconds is the VRAM slices' bytes × seconds held.
	SliceByteSeconds float64
	// WholeGPUSeconds is the part of GPUSeconds of runs that asked for whole GPUs (no VRAM slice).
	WholeGPUSeconds float64
	// ChargedRuns and ChargedGPUSeconds are what Slurm charged the pool's license: the runs Slurm ran within the
	// period, and their license count (GPUs, a VRAM slice 1) × seconds from the job's start to its end.
	ChargedRuns       int
	ChargedGPUSeconds float64
}

// Usage reports the cluster's use of GPUs from since to until, by user, account or pool, and pool.
func (s *Store) Usage(ctx context.Context, by UsageBy, since, until time.Time) ([]Usage, error) {
	col, ok := usageColumns[by]
	if !ok {
		return nil, fmt.Errorf("usage by %q: want user, account or pool", by)
	}
	rows, err := s.pool.Query(ctx, sqlUsage(col), s.cluster, since, until)
	if err != nil {
		return nil, fmt.Errorf("usage by %s: %w", by, err)
	}
	us, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Usage, error) {
		var u Usage
		err := row.Scan(&u.Key, &u.Pool, &u.Runs, &u.GPUSeconds, &u.SliceByteSeconds, &u.WholeGPUSeconds,
			&u.ChargedRuns, &u.ChargedGPUSeconds)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("usage by %s: %w", by, err)
	}
	return us, nil
}

// Summary counts the cluster's reservations by pool and state.
func (s *Store) Summary(ctx context.Context) ([]Count, error) {
	return s.counts(ctx, "summary", sqlSummary)
}

// OpenCounts counts the cluster's open reservations (not released or failed) by pool and state, reading only
// the index of open rows.
func (s *Store) OpenCounts(ctx context.Context) ([]Count, error) {
	return s.counts(ctx, "open counts", sqlOpenCounts)
}

func (s *Store) counts(ctx context.Context, what, sql string) ([]Count, error) {
	rows, err := s.pool.Query(ctx, sql, s.cluster)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Count, error) {
		var c Count
		err := row.Scan(&c.Pool, &c.State, &c.N)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return cs, nil
}

// AcquireLease takes or renews the named lease for holder; it reports whether holder has it now.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	var got string
	err := s.pool.QueryRow(ctx, sqlAcquireLease, name, holder, ttl.Milliseconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	return got == holder, nil
}

// ReleaseLease gives the lease up, if holder has it.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := s.pool.Exec(ctx, sqlReleaseLease, name, holder); err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

// LeaseHolder says who holds the named lease now, for status; "" when nobody does.
func (s *Store) LeaseHolder(ctx context.Context, name string) (string, time.Time, error) {
	var holder string
	var until time.Time
	err := s.pool.QueryRow(ctx, sqlLeaseHolder, name).Scan(&holder, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, nil
	}
	return holder, until, err
}

func scanOne(rows pgx.Rows, err error) (reconcile.Reservation, error) {
	rs, err := scanAll(rows, err)
	if err != nil {
		return reconcile.Reservation{}, err
	}
	if len(rs) == 0 {
		return reconcile.Reservation{}, reconcile.ErrNotFound
	}
	return rs[0], nil
}

func scanAll(rows pgx.Rows, err error) ([]reconcile.Reservation, error) {
	return scanRows(rows, err)
}

// scanRows reads rows of the reservation columns, each followed by the columns extra scans into (the last row's
// values are left there).
func scanRows(rows pgx.Rows, err error, extra ...any) ([]reconcile.Reservation, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.Reservation, error) {
		var r reconcile.Reservation
		var jobID, array, task, sealedFor *int64
		var text string
		var readyAt *time.Time
		dest := []any{&r.ID, &r.Run.Cluster, &jobID, &r.Run.Run, &text, &r.UserName, &r.Account, &r.Partition, &r.CreatedAt,
			&r.Spec.Wanted, &r.Spec.WantReason, &r.Spec.RunOver, &r.Spec.JobState, &r.Spec.JobReason,
			&r.Status.State, &r.Status.Reason, &r.Status.FailReason, &r.Status.Requested, &r.Status.SessionID,
			&r.Status.AgentAddress, &readyAt, &r.Status.UpdatedAt, &r.Status.Version, &array, &task, &sealedFor, &r.Status.MaybeOrphans}
		dest = append(dest, extra...)
		if n := len(row.FieldDescriptions()); n > len(dest) {
			var notified string // the notification column of sqlEnsure
			dest = append(dest, &notified)
		}
		if err := row.Scan(dest...); err != nil {
			return r, err
		}
		r.Run = runID(r.Run.Cluster, jobID, r.Run.Run, array, task)
		if sealedFor != nil {
			r.Status.SealedJobID = uint32(*sealedFor)
		}
		if readyAt != nil {
			r.Status.ReadyAt = *readyAt
		}
		// A row holds only what Ensure wrote, which was parsed before; a failure here means the row was edited.
		var err error
		if r.Request, err = request.Parse(text); err != nil {
			return r, fmt.Errorf("reservation %s: stored request: %w", r.ID, err)
		}
		return r, nil
	})
}

// runID names a stored run: job id NULL for an array element not bound yet.
func runID(cluster string, job *int64, run int, array, task *int64) reconcile.RunID {
	id := reconcile.RunID{Cluster: cluster, Run: run}
	if job != nil {
		id.JobID = uint32(*job)
	}
	if array != nil && task != nil {
		id.ArrayJobID, id.ArrayTaskID = uint32(*array), uint32(*task)
	}
	return id
}
