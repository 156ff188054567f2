package reconcile

// Every SQL statement of the project, in one place.

// NotifyChannel is the LISTEN/NOTIFY channel on which every change of a reservation is announced, with the
// payload "<reservation id> <state> <version>". Waiting prologs on any replica and the leader's work queue listen
// on it.
const NotifyChannel = "juice_reservations"

const reservationColumns = `id, cluster, job_id, run, request, user_name, partition, state, reason, fail_reason,
	wanted, requested, session_id, agent_address, sealed, job_state, created_at, updated_at, ready_at, version, run_over`

// reservationColumnsBrief reads the same columns but leaves the sealed session file out.
const reservationColumnsBrief = `id, cluster, job_id, run, request, user_name, partition, state, reason, fail_reason,
	wanted, requested, session_id, agent_address, NULL::bytea AS sealed, job_state, created_at, updated_at, ready_at, version,
	run_over`

const (
	sqlMigrationsTable = `CREATE TABLE IF NOT EXISTS juice_schema_migrations (
		version    integer PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`
	// The lock serialises replicas that start at once; it is held only for the migration's transaction.
	sqlMigrationLock    = `SELECT pg_advisory_xact_lock(8316250011)`
	sqlMigrationApplied = `SELECT EXISTS (SELECT 1 FROM juice_schema_migrations WHERE version = $1)`
	sqlMigrationRecord  = `INSERT INTO juice_schema_migrations (version) VALUES ($1)`

	// Insert a pending reservation unless the run has a live one already, or is over: ON CONFLICT names the
	// partial unique index's predicate.
	sqlInsertReservation = `INSERT INTO juice_reservations
		(id, cluster, job_id, run, request, pool, gpus, vram, user_name, partition, state, reason, wanted, job_state)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, true, $12)
		ON CONFLICT (cluster, job_id, run) WHERE state <> 'released' OR run_over DO NOTHING
		RETURNING ` + reservationColumns
	sqlLiveByRun = `SELECT ` + reservationColumns + ` FROM juice_reservations
		WHERE cluster = $1 AND job_id = $2 AND run = $3 AND (state <> 'released' OR run_over)`
	sqlLatestByRun = `SELECT ` + reservationColumns + ` FROM juice_reservations
		WHERE cluster = $1 AND job_id = $2 AND run = $3 ORDER BY created_at DESC, id LIMIT 1`
	sqlByID  = `SELECT ` + reservationColumns + ` FROM juice_reservations WHERE id = $1`
	sqlByJob = `SELECT ` + reservationColumns + ` FROM juice_reservations
		WHERE cluster = $1 AND job_id = $2 ORDER BY run, created_at`
	// Open rows are read on every poll: without the sealed session file, which only the prolog needs.
	sqlOpen = `SELECT ` + reservationColumnsBrief + ` FROM juice_reservations
		WHERE state NOT IN ('released', 'failed') ORDER BY created_at`
	// A write is based on the version the writer read; a row changed meanwhile is left alone (no row comes
	// back: ErrConflict). The update, its event (when $13 names one) and the notification are one statement, so
	// one round trip and one implicit transaction: a state change is the hot path of every reservation.
	sqlSaveReservation = `WITH u AS (
			UPDATE juice_reservations SET
				state = $3, reason = $4, fail_reason = $5, wanted = $6, requested = $7, session_id = $8,
				agent_address = $9, sealed = $10, job_state = $11, ready_at = $12, run_over = $16, updated_at = now(),
				version = version + 1
			WHERE id = $1 AND version = $2
			RETURNING id, state, updated_at, version),
		e AS (
			INSERT INTO juice_events (reservation_id, from_state, to_state, event, reason)
			SELECT u.id, $14, u.state, $13, $15 FROM u WHERE $13::text IS NOT NULL)
		SELECT u.updated_at, u.version, pg_notify('` + NotifyChannel + `', u.id::text || ' ' || u.state || ' ' || u.version)
		FROM u`
	sqlInsertEvent = `INSERT INTO juice_events (reservation_id, from_state, to_state, event, reason)
		VALUES ($1, $2, $3, $4, $5)`
	sqlNotify = `SELECT pg_notify('` + NotifyChannel + `', $1)`
	sqlEvents = `SELECT from_state, to_state, event, reason, at FROM juice_events
		WHERE reservation_id = $1 ORDER BY id`
	sqlSummary = `SELECT pool, state, count(*) FROM juice_reservations GROUP BY pool, state ORDER BY pool, state`

	// Take the lease when it is free, expired or already ours; otherwise leave it. The row comes back only
	// when the caller holds the lease afterwards.
	sqlAcquireLease = `INSERT INTO juice_leases (name, holder, acquired_at, expires_at)
		VALUES ($1, $2, now(), now() + $3 * interval '1 millisecond')
		ON CONFLICT (name) DO UPDATE SET
			holder = EXCLUDED.holder,
			acquired_at = CASE WHEN juice_leases.holder = EXCLUDED.holder THEN juice_leases.acquired_at ELSE now() END,
			expires_at = EXCLUDED.expires_at
		WHERE juice_leases.holder = EXCLUDED.holder OR juice_leases.expires_at < now()
		RETURNING holder`
	sqlReleaseLease = `DELETE FROM juice_leases WHERE name = $1 AND holder = $2`
	sqlLeaseHolder  = `SELECT holder, expires_at FROM juice_leases WHERE name = $1 AND expires_at >= now()`
)
