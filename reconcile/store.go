package reconcile

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
)

// Store keeps every reservation, its history and the leader lease. PGStore is its PostgreSQL implementation;
// every replica of the controller shares one database.
type Store interface {
	// Ensure returns the run's live reservation, creating a pending, wanted one when there is none and the run is
	// not over (a run that is over gives its last reservation back, final).
	Ensure(ctx context.Context, nr NewReservation) (r Reservation, created bool, err error)
	Get(ctx context.Context, id uuid.UUID) (Reservation, error)
	// ForRun returns the run's live reservation (or the one that ended it), or else its latest released one.
	ForRun(ctx context.Context, run RunID) (Reservation, error)
	ForJob(ctx context.Context, cluster string, jobID uint32) ([]Reservation, error)
	// Open lists the reservations that are not final, without their sealed session files (Sealed is nil).
	Open(ctx context.Context) ([]Reservation, error)
	// Save writes r (read at r.Version) and, when t is not nil, the transition as an event; it announces the
	// change on NotifyChannel. A row changed by someone else since r was read gives ErrConflict.
	Save(ctx context.Context, r *Reservation, t *Transition) error
	Events(ctx context.Context, id uuid.UUID) ([]Transition, error)
	Summary(ctx context.Context) ([]Count, error)
	// AcquireLease takes or renews the named lease for holder; it reports whether holder has it now.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, name, holder string) error
}

// NewReservation is what is known of a run when it is first seen.
type NewReservation struct {
	Run       RunID
	Request   Request
	UserName  string
	Partition string
	JobState  string
	// Reason says who saw the run first: the poller, or a prolog that came before it.
	Reason string
}

// Count is one cell of the status table.
type Count struct {
	Pool  string
	State State
	N     int
}

var (
	// ErrNotFound: no such reservation.
	ErrNotFound = errors.New("reservation not found")
	// ErrConflict: the row changed since it was read; read it again and decide again.
	ErrConflict = errors.New("reservation changed concurrently")
)

//go:embed migrations/*.sql
var migrations embed.FS

// PGStore is the Store on PostgreSQL.
type PGStore struct {
	pool *pgxpool.Pool
}

// NewPGStore wraps a pool; call Migrate before use.
func NewPGStore(pool *pgxpool.Pool) *PGStore { return &PGStore{pool: pool} }

// Pool returns the underlying pool, for LISTEN.
func (s *PGStore) Pool() *pgxpool.Pool { return s.pool }

// Migrate applies the embedded migrations that the database lacks, each in its own transaction, in order.
func (s *PGStore) Migrate(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, sqlMigrationsTable); err != nil {
		return fmt.Errorf("migrate: create the migrations table: %w", err)
	}
	entries, err := migrations.ReadDir("migrations")
	if err != nil {
		return err
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

func (s *PGStore) Ensure(ctx context.Context, nr NewReservation) (Reservation, bool, error) {
	if nr.Request.VRAM > math.MaxInt64 {
		return Reservation{}, false, fmt.Errorf("ensure reservation of %s: VRAM %d bytes does not fit the database", nr.Run, nr.Request.VRAM)
	}
	var r Reservation
	created := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		id := uuid.New()
		var err error
		r, err = scanOne(tx.Query(ctx, sqlInsertReservation, id, nr.Run.Cluster, int64(nr.Run.JobID), nr.Run.Run,
			nr.Request.String(), nr.Request.Pool, nr.Request.GPUs, int64(nr.Request.VRAM), nr.UserName, nr.Partition,
			nr.Reason, nr.JobState))
		if errors.Is(err, ErrNotFound) {
			// The run has a live reservation already.
			r, err = scanOne(tx.Query(ctx, sqlLiveByRun, nr.Run.Cluster, int64(nr.Run.JobID), nr.Run.Run))
			return err
		}
		if err != nil {
			return err
		}
		created = true
		if _, err := tx.Exec(ctx, sqlInsertEvent, r.ID, "", StatePending, "created", nr.Reason); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, sqlNotify, fmt.Sprintf("%s %s %d", r.ID, r.State, r.Version))
		return err
	})
	if err != nil {
		return Reservation{}, false, fmt.Errorf("ensure reservation of %s: %w", nr.Run, err)
	}
	return r, created, nil
}

func (s *PGStore) Get(ctx context.Context, id uuid.UUID) (Reservation, error) {
	r, err := scanOne(s.pool.Query(ctx, sqlByID, id))
	if err != nil {
		return Reservation{}, fmt.Errorf("get reservation %s: %w", id, err)
	}
	return r, nil
}

func (s *PGStore) ForRun(ctx context.Context, run RunID) (Reservation, error) {
	r, err := scanOne(s.pool.Query(ctx, sqlLiveByRun, run.Cluster, int64(run.JobID), run.Run))
	if errors.Is(err, ErrNotFound) {
		r, err = scanOne(s.pool.Query(ctx, sqlLatestByRun, run.Cluster, int64(run.JobID), run.Run))
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("reservation of %s: %w", run, err)
	}
	return r, nil
}

func (s *PGStore) ForJob(ctx context.Context, cluster string, jobID uint32) ([]Reservation, error) {
	rs, err := scanAll(s.pool.Query(ctx, sqlByJob, cluster, int64(jobID)))
	if err != nil {
		return nil, fmt.Errorf("reservations of job %d: %w", jobID, err)
	}
	return rs, nil
}

func (s *PGStore) Open(ctx context.Context) ([]Reservation, error) {
	rs, err := scanAll(s.pool.Query(ctx, sqlOpen))
	if err != nil {
		return nil, fmt.Errorf("open reservations: %w", err)
	}
	return rs, nil
}

func (s *PGStore) Save(ctx context.Context, r *Reservation, t *Transition) error {
	var readyAt *time.Time
	if !r.ReadyAt.IsZero() {
		readyAt = &r.ReadyAt
	}
	var event, from, reason *string
	if t != nil {
		ev, fr := string(t.Event), string(t.From)
		event, from, reason = &ev, &fr, &t.Reason
	}
	var notified string
	err := s.pool.QueryRow(ctx, sqlSaveReservation, r.ID, r.Version, r.State, r.Reason, r.FailReason, r.Wanted,
		r.Requested, r.SessionID, r.AgentAddress, r.Sealed, r.JobState, readyAt, event, from, reason, r.RunOver).
		Scan(&r.UpdatedAt, &r.Version, &notified)
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrConflict
	}
	if err != nil {
		return fmt.Errorf("save reservation %s of %s: %w", r.ID, r.Run, err)
	}
	return nil
}

func (s *PGStore) Events(ctx context.Context, id uuid.UUID) ([]Transition, error) {
	rows, err := s.pool.Query(ctx, sqlEvents, id)
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", id, err)
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Transition, error) {
		var t Transition
		var ev string
		err := row.Scan(&t.From, &t.To, &ev, &t.Reason, &t.At)
		t.Event = Event(ev)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", id, err)
	}
	return ts, nil
}

func (s *PGStore) Summary(ctx context.Context) ([]Count, error) {
	rows, err := s.pool.Query(ctx, sqlSummary)
	if err != nil {
		return nil, fmt.Errorf("summary: %w", err)
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Count, error) {
		var c Count
		err := row.Scan(&c.Pool, &c.State, &c.N)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("summary: %w", err)
	}
	return cs, nil
}

func (s *PGStore) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
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

func (s *PGStore) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := s.pool.Exec(ctx, sqlReleaseLease, name, holder); err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

// LeaseHolder says who holds the named lease now, for status; "" when nobody does.
func (s *PGStore) LeaseHolder(ctx context.Context, name string) (string, time.Time, error) {
	var holder string
	var until time.Time
	err := s.pool.QueryRow(ctx, sqlLeaseHolder, name).Scan(&holder, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, nil
	}
	return holder, until, err
}

func scanOne(rows pgx.Rows, err error) (Reservation, error) {
	rs, err := scanAll(rows, err)
	if err != nil {
		return Reservation{}, err
	}
	if len(rs) == 0 {
		return Reservation{}, ErrNotFound
	}
	return rs[0], nil
}

func scanAll(rows pgx.Rows, err error) ([]Reservation, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Reservation, error) {
		var r Reservation
		var jobID int64
		var request string
		var readyAt *time.Time
		err := row.Scan(&r.ID, &r.Run.Cluster, &jobID, &r.Run.Run, &request, &r.UserName, &r.Partition, &r.State,
			&r.Reason, &r.FailReason, &r.Wanted, &r.Requested, &r.SessionID, &r.AgentAddress, &r.Sealed, &r.JobState,
			&r.CreatedAt, &r.UpdatedAt, &readyAt, &r.Version, &r.RunOver)
		if err != nil {
			return r, err
		}
		r.Run.JobID = uint32(jobID)
		if readyAt != nil {
			r.ReadyAt = *readyAt
		}
		// A row holds only what Ensure wrote, which was parsed before; a failure here means the row was edited.
		if r.Request, err = ParseRequest(request); err != nil {
			return r, fmt.Errorf("reservation %s: stored request: %w", r.ID, err)
		}
		return r, nil
	})
}
