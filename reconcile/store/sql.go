package store

import (
	"strings"

	"github.com/juice-slurm/juice-slurm/reconcile"
)

// Every SQL statement of juice-slurm, in one place. Every statement about reservations names its cluster ($1):
// several clusters may share one database, and none reads or writes another's rows.

// NotifyChannel is the LISTEN/NOTIFY channel on which every change of a reservation is announced, with the
// payload "<cluster> <reservation id> <kind>" (see Kind), and for a status change " <state>" after it.
const NotifyChannel = "juice_reservations"

// blocksNew is the database's guard of reconcile.Reservable, which decides whether a run may be reserved again:
// a reservation blocks a new one of its run while it is live (not released) or once it failed or ended the run
// (run_over). The partial unique indexes juice_reservations_live_run (migration 0002) and
// juice_reservations_live_element (0005) are built on exactly this predicate, so that Ensure's ON CONFLICT holds
// the rule even when two writers race (the poller and a prolog); it decides nothing the poller has not decided.
// TestBlocksNewIsTheIndexPredicate checks that the indexes are built on it, TestBlocksNewIsReservable that it
// says what Reservable says.
const blocksNew = `(state <> 'released' OR run_over)`

// steady is a reservation with nothing to do until something changes: ready for a run that still wants it, sealed
// for its job, its job not waiting to begin. The liveness watch looks after such rows, so the frequent re-list
// passes them over; the full one, and every wake-up, does not.
const steady = `(state = 'ready' AND wanted AND (job_id IS NULL OR coalesce(sealed_job_id, 0) = job_id) AND job_state <> 'PENDING')`

const columns = `id, cluster, job_id, run, request, user_name, account, partition, created_at,
	wanted, want_reason, run_over, job_state, job_reason,
	state, reason, fail_reason, requested, session_id, agent_address, ready_at, updated_at, version,
	array_job_id, array_task_id, sealed_job_id, maybe_orphans`

// notify announces a row's change; it is selected in the statement that makes the change, so that the change and
// its announcement commit together.
func notify(row, kind string) string {
	payload := row + `.cluster || ' ' || ` + row + `.id::text || ' ' || '` + kind + `'`
	if kind == string(KindStatus) {
		payload += ` || ' ' || ` + row + `.state`
	}
	return `pg_notify('` + NotifyChannel + `', ` + payload + `)`
}

const (
	sqlMigrationsTable = `CREATE TABLE IF NOT EXISTS juice_schema_migrations (
		version    integer PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`
	// The lock serialises replicas that start at once; it is held only for the migration's transaction.
	sqlMigrationLock    = `SELECT pg_advisory_xact_lock(8316250011)`
	sqlMigrationApplied = `SELECT EXISTS (SELECT 1 FROM juice_schema_migrations WHERE version = $1)`
	sqlMigrationRecord  = `INSERT INTO juice_schema_migrations (version) VALUES ($1)`
	// A database never migrated has no table, and is at version 0.
	sqlHasMigrations = `SELECT to_regclass('juice_schema_migrations') IS NOT NULL`
	sqlSchemaVersion = `SELECT coalesce(max(version), 0) FROM juice_schema_migrations`
	sqlCurrentSchema = `SELECT current_schema()`
	// The tables and sequences juice-slurm owns, for GrantRuntime: its own (juice_*), in the current schema.
	sqlOwnTables = `SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
		AND c.relkind = 'r' AND c.relname LIKE 'juice\_%' ORDER BY 1`
	sqlOwnSequences = `SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
		AND c.relkind = 'S' AND c.relname LIKE 'juice\_%' ORDER BY 1`
	sqlIndexPredicate = `SELECT pg_get_expr(indpred, indrelid) FROM pg_index
		WHERE indexrelid = 'juice_reservations_live_run'::regclass`
)

// Observers' statements: they create reservations and write the spec, never the status.
var (
	// Insert pending, wanted reservations for the runs that may be reserved (blocksNew); the others are left as
	// they are. One statement for any number of runs, with the creation events and the notifications.
	sqlEnsure = `WITH n AS (
			SELECT * FROM unnest($2::uuid[], $3::bigint[], $4::integer[], $5::text[], $6::text[], $7::integer[],
				$8::bigint[], $9::text[], $10::text[], $11::text[], $12::text[], $13::bigint[], $14::bigint[], $15::text[],
				$16::text[])
				AS n(id, job_id, run, request, pool, gpus, vram, user_name, partition, reason, job_state, array_job_id,
					array_task_id, account, job_reason)),
		ins AS (
			INSERT INTO juice_reservations (id, cluster, job_id, run, request, pool, gpus, vram, user_name, partition,
				state, reason, wanted, job_state, job_reason, array_job_id, array_task_id, account)
			SELECT id, $1, job_id, run, request, pool, gpus, vram, user_name, partition, 'pending', reason, true, job_state,
				job_reason, array_job_id, array_task_id, account
			FROM n
			-- The arbiters are juice_reservations_live_run and, for an array's element, juice_reservations_live_element
			-- (the same predicate): a run blocked by either is left as it is.
			ON CONFLICT DO NOTHING
			RETURNING ` + columns + `),
		ev AS (
			INSERT INTO juice_events (reservation_id, from_state, to_state, event, reason)
			SELECT id, '', 'pending', 'created', reason FROM ins)
		SELECT ` + columns + `, ` + notify("ins", "created") + ` FROM ins`

	// Bind gives an array element's reservations that have no job id yet ($2 array, $3 task, $4 run) the job id
	// $5 slurmctld gave the element, with an event in each one's history. The job id is what Slurm says of the
	// element: a spec write; the reconciler then seals the session file again for that job.
	sqlBind = `WITH b AS (
			UPDATE juice_reservations SET job_id = $5
			WHERE cluster = $1 AND array_job_id = $2 AND array_task_id = $3 AND run = $4 AND job_id IS NULL
			RETURNING cluster, id, state),
		ev AS (
			INSERT INTO juice_events (reservation_id, from_state, to_state, event, reason)
			SELECT id, state, state, 'bound', 'array element ' || $2::text || '_' || $3::text || ' is job ' || $5::text FROM b)
		SELECT ` + notify("b", "spec") + ` FROM b`

	// Unwant marks a reservation not wanted (keeping the first reason) and, when $4, its run over. A row that
	// already says so is not touched, and not announced.
	sqlUnwant = `UPDATE juice_reservations SET
			want_reason = CASE WHEN wanted AND state NOT IN ('released', 'failed') THEN $3 ELSE want_reason END,
			wanted = false, run_over = run_over OR $4
		WHERE cluster = $1 AND id = $2 AND (wanted AND state NOT IN ('released', 'failed') OR $4 AND NOT run_over)
		RETURNING ` + notify("juice_reservations", "spec")
	// A started run's session waits for GPUs (reconcile.MustYield): the pool's reservations of jobs Slurm shows
	// pending that hold or ask for a session let go, their runs not over, on the partial index of open rows.
	sqlYieldPool = `UPDATE juice_reservations SET want_reason = $3, wanted = false
		WHERE cluster = $1 AND pool = $2 AND wanted AND job_state = 'PENDING'
			AND state IN ('requesting', 'waiting', 'ready')
		RETURNING ` + notify("juice_reservations", "spec")
	// The run's latest reservation: the live one when there is one (it is always the newest).
	sqlLatestIDByRun = `SELECT id FROM juice_reservations WHERE cluster = $1 AND job_id = $2 AND run = $3
		ORDER BY created_at DESC, id DESC LIMIT 1`
	// What Slurm says of the job, for the job actor and for people: written only when it changed.
	// A run Slurm started is never pending again (a requeue is a new run): a listing taken before the start and
	// applied after the prolog recorded it must not make a started run look pending (reconcile.MustYield).
	sqlObserveJob = `UPDATE juice_reservations SET job_state = $3, job_reason = $4
		WHERE cluster = $1 AND id = $2 AND state NOT IN ('released', 'failed') AND (job_state <> $3 OR job_reason <> $4)
			AND NOT ($3 = 'PENDING' AND job_state IN (` + sqlStrings(reconcile.StartedStates) + `))
		RETURNING ` + notify("juice_reservations", "observed")
	// Slurm's start and end of a run's job, each written once (NULL: not known yet), on a final reservation too:
	// the epilog often releases a run before the poller sees its job's end. Nobody waits on them: no NOTIFY.
	sqlObserveTimes = `UPDATE juice_reservations SET job_start = coalesce(job_start, $3), job_end = coalesce(job_end, $4)
		WHERE cluster = $1 AND id = $2
			AND ((job_start IS NULL AND $3::timestamptz IS NOT NULL) OR (job_end IS NULL AND $4::timestamptz IS NOT NULL))`
)

// The reconciler's statement: the status, based on the version it read.
var (
	// A row changed by another status write since it was read is left alone (no row comes back: ErrConflict).
	// The update, its events (one per transition, in order) and the notification are one statement: one round
	// trip, one implicit transaction.
	// The sealed session file is kept when $9 is NULL, and dropped once the reservation is final.
	sqlSaveStatus = `WITH u AS (
			UPDATE juice_reservations SET
				state = $4, reason = $5, fail_reason = $6, requested = $7, session_id = $8,
				sealed = CASE WHEN $4 IN ('released', 'failed') THEN NULL ELSE coalesce($9, sealed) END,
				sealed_job_id = CASE WHEN $4 IN ('released', 'failed') THEN NULL WHEN $9::bytea IS NULL THEN sealed_job_id
					ELSE $15 END,
				agent_address = $10, ready_at = $11, maybe_orphans = $16, updated_at = now(), version = version + 1
			WHERE cluster = $1 AND id = $2 AND version = $3
			RETURNING cluster, id, state, updated_at, version),
		e AS (
			INSERT INTO juice_events (reservation_id, from_state, to_state, event, reason)
			SELECT u.id, x.f, x.t, x.ev, x.why FROM u, unnest($12::text[], $17::text[], $13::text[], $14::text[])
				WITH ORDINALITY AS x(f, t, ev, why, n) ORDER BY x.n)
		SELECT u.updated_at, u.version, ` + notify("u", "status") + ` FROM u`
)

// Reads.
var (
	sqlByID    = `SELECT ` + columns + ` FROM juice_reservations WHERE cluster = $1 AND id = $2`
	sqlSealed  = `SELECT sealed FROM juice_reservations WHERE cluster = $1 AND id = $2`
	sqlLiveRun = `SELECT ` + columns + ` FROM juice_reservations WHERE cluster = $1 AND job_id = $2 AND run = $3 AND ` + blocksNew
	// The same with the sealed session file: a prolog whose session is ready makes this one query.
	sqlLiveRunSealed = `SELECT ` + columns + `, sealed FROM juice_reservations WHERE cluster = $1 AND job_id = $2 AND run = $3 AND ` + blocksNew
	sqlLatestRun     = `SELECT ` + columns + ` FROM juice_reservations WHERE cluster = $1 AND job_id = $2 AND run = $3
		ORDER BY created_at DESC, id DESC LIMIT 1`
	// Every reservation of one run, open or final, as sqlTracked reads them: what reconcile.Reservable needs.
	sqlRunReservations = `SELECT id, job_id, run, array_job_id, array_task_id, state, run_over, job_state, job_reason,
			job_start IS NOT NULL, job_end IS NOT NULL
		FROM juice_reservations WHERE cluster = $1 AND job_id = $2 AND run = $3`
	sqlByJob = `SELECT ` + columns + ` FROM juice_reservations WHERE cluster = $1 AND job_id = $2 ORDER BY run, created_at`
	// An array's elements, bound or not, by task id.
	sqlByArray = `SELECT ` + columns + ` FROM juice_reservations WHERE cluster = $1 AND array_job_id = $2
		ORDER BY array_task_id, run, created_at`
	// A user's runs, newest first, at most $3 (juice-slurm jobs, through the hook API).
	sqlByUser = `SELECT ` + columns + ` FROM juice_reservations WHERE cluster = $1 AND user_name = $2
		ORDER BY created_at DESC LIMIT $3`
	sqlOpen = `SELECT ` + columns + ` FROM juice_reservations
		WHERE cluster = $1 AND state NOT IN ('released', 'failed') ORDER BY created_at`
	sqlOpenIDs = `SELECT id FROM juice_reservations WHERE cluster = $1 AND state NOT IN ('released', 'failed')
		AND ($2 OR NOT ` + steady + `) ORDER BY created_at`
	// The open runs as the poller compares them with Slurm: which run, where it stands, what Slurm said last.
	sqlTracked = `SELECT id, job_id, run, array_job_id, array_task_id, state, run_over, job_state, job_reason,
			job_start IS NOT NULL, job_end IS NOT NULL
		FROM juice_reservations WHERE cluster = $1 AND state NOT IN ('released', 'failed') ORDER BY created_at`
	// The open runs whose session is ready and whose job Slurm runs, read as sqlTracked reads them: the runs that may
	// want their session file in the state directory (reconcile.WantsFile decides). As many as the GPUs in use, not
	// the queue; the partial index of the open rows finds them.
	sqlRunningReady = `SELECT id, job_id, run, array_job_id, array_task_id, state, run_over, job_state, job_reason,
			job_start IS NOT NULL, job_end IS NOT NULL
		FROM juice_reservations WHERE cluster = $1 AND state NOT IN ('released', 'failed')
		AND state = 'ready' AND job_state = 'RUNNING' ORDER BY created_at`
	// The ready runs, for the liveness watch: what a pool walk is compared with.
	sqlReady = `SELECT id, pool, session_id, agent_address, ready_at FROM juice_reservations
		WHERE cluster = $1 AND state = 'ready'`
	// The final reservations of the given jobs' runs, as sqlTracked reads the open ones: what reconcile.Reservable
	// needs besides them. An array's elements are found by their array's id too (bound to a job id or not).
	sqlEnded = `SELECT id, job_id, run, array_job_id, array_task_id, state, run_over, job_state, job_reason,
			job_start IS NOT NULL, job_end IS NOT NULL
		FROM juice_reservations
		WHERE cluster = $1 AND (job_id = ANY($2) OR array_job_id = ANY($2)) AND state IN ('released', 'failed')`
	sqlEvents = `SELECT e.from_state, e.to_state, e.event, e.reason, e.at FROM juice_events e
		JOIN juice_reservations r ON r.id = e.reservation_id
		WHERE r.cluster = $1 AND e.reservation_id = $2 ORDER BY e.id`
	// The GPUs a user holds or is getting in a pool (the site policy's max_gpus_per_user): its runs that were
	// asked of the Juice Controller and are not released yet, on the partial index of open rows.
	sqlHeldGPUs = `SELECT coalesce(sum(gpus), 0) FROM juice_reservations WHERE cluster = $1 AND pool = $2
		AND user_name = $3 AND state IN ('requesting', 'waiting', 'ready', 'releasing')`
	// The pool's oldest $3 runs whose sessions are queued at the Juice Controller (on the partial index of open rows).
	sqlQueuedIn = `SELECT id FROM juice_reservations WHERE cluster = $1 AND pool = $2 AND state = 'waiting' AND wanted
		ORDER BY created_at, id LIMIT $3`
	// Whether a run other than $3 waits for GPUs in a pool: wanted, and not served yet (on the partial index of
	// open rows).
	sqlPoolWaits = `SELECT EXISTS (SELECT 1 FROM juice_reservations WHERE cluster = $1 AND pool = $2 AND id <> $3
		AND wanted AND state IN ('pending', 'requesting', 'waiting'))`
	// Session hand-off (reconcile/handoff.go): the runs alike to a run ($2 pool, $3 request, $4 user, $5 account,
	// not $6 itself). The reconciler decides (reconcile.MayTake); these only narrow down to the rows it decides on.
	// A taker: wanted, and pending or a started run's waiting with its own session queued; a started run's first,
	// then the oldest.
	sqlHandoffTaker = `SELECT ` + columns + ` FROM juice_reservations WHERE cluster = $1 AND pool = $2 AND request = $3
		AND user_name = $4 AND account = $5 AND id <> $6 AND wanted AND user_name <> ''
		AND (state = 'pending' OR state = 'waiting' AND job_state IN (` + sqlStrings(reconcile.StartedStates) + `)
			AND session_id <> '' AND NOT maybe_orphans)
		ORDER BY job_state IN (` + sqlStrings(reconcile.StartedStates) + `) DESC, created_at, id LIMIT 1`
	// A giver: its run over (not by an administrator's release, $8) and its session ready, not failed, and releasing since less than $7 milliseconds, or
	// still ready (the reconciler has not taken up the run's end yet).
	sqlHandoffLingers = `SELECT EXISTS (SELECT 1 FROM juice_reservations WHERE cluster = $1 AND pool = $2 AND request = $3
		AND user_name = $4 AND account = $5 AND id <> $6 AND run_over AND fail_reason = '' AND want_reason <> $8
		AND session_id <> '' AND ready_at IS NOT NULL AND NOT maybe_orphans
		AND (state = 'releasing' AND updated_at > now() - $7 * interval '1 millisecond' OR state = 'ready' AND NOT wanted))`
	// The like runs that asked for a session of their own and wait for it, oldest first.
	sqlLikeAsking = `SELECT ` + columns + ` FROM juice_reservations WHERE cluster = $1 AND pool = $2 AND request = $3
		AND user_name = $4 AND account = $5 AND id <> $6 AND state IN ('requesting', 'waiting') AND wanted
		ORDER BY created_at, id LIMIT $7`
	// The open reservation that holds session $2, if any (index juice_reservations_session).
	sqlHolding = `SELECT ` + columns + ` FROM juice_reservations WHERE cluster = $1 AND session_id = $2
		AND state NOT IN ('released', 'failed') ORDER BY created_at LIMIT 1`
	sqlSummary = `SELECT pool, state, count(*) FROM juice_reservations WHERE cluster = $1
		GROUP BY pool, state ORDER BY pool, state`
	// Retention: the oldest reservations that ended before $2, at most $3 of them (index
	// juice_reservations_ended); their events go with them (ON DELETE CASCADE).
	sqlPrune = `DELETE FROM juice_reservations WHERE id IN (
		SELECT id FROM juice_reservations WHERE cluster = $1 AND state IN ('released', 'failed') AND updated_at < $2
		ORDER BY updated_at LIMIT $3)`
	// The open rows only, on the partial index juice_reservations_open: a metrics scrape must not read the
	// history of ended runs.
	sqlOpenCounts = `SELECT pool, state, count(*) FROM juice_reservations WHERE cluster = $1
		AND state NOT IN ('released', 'failed') GROUP BY pool, state ORDER BY pool, state`
)

// sqlUsage is the accounting of juice-slurm report, grouped by keyColumn (user_name, account or pool; never a
// user's text) and pool, on two bases, each counting only the part of a run's time within [$2, $3):
//
//   - held: each run whose session was ready within the period. A run holds its session from ready_at until its
//     reservation became final (released or failed: its session was cancelled, updated_at) or, while it is not
//     final, until now. Per group: the runs, GPU-seconds (gpus × seconds), the byte-seconds of VRAM slices, and
//     the GPU-seconds of runs that asked for whole GPUs (whose VRAM is the pool's, known only to the site policy).
//   - charged: what Slurm charged the pool's license, as sacct and sreport count it: each run Slurm started, from
//     its job's start_time to its end_time (job_start, job_end), the license's count being the run's GPUs (a VRAM
//     slice takes 1: licenses.For). A run is counted once, whichever of its reservations carries the times. One
//     whose end was never seen (its job requeued or purged first) counts until its reservation became final, or
//     now while it is open.
func sqlUsage(keyColumn string) string {
	return `SELECT key, pool, sum(runs)::int, sum(gs), sum(sb), sum(ws), sum(cruns)::int, sum(cgs)
		FROM (
			SELECT key, pool, count(*) AS runs, sum(gpus * s) AS gs,
					sum(CASE WHEN vram > 0 THEN vram::float8 * gpus * s ELSE 0 END) AS sb,
					sum(CASE WHEN vram = 0 THEN gpus * s ELSE 0 END) AS ws, 0::bigint AS cruns, 0::float8 AS cgs
				FROM (SELECT ` + keyColumn + ` AS key, pool, gpus, vram,
						extract(epoch FROM least(CASE WHEN state IN ('released', 'failed') THEN updated_at ELSE now() END, $3)
							- greatest(ready_at, $2))::float8 AS s
					FROM juice_reservations WHERE cluster = $1 AND ready_at IS NOT NULL AND ready_at < $3) held
				WHERE s > 0 GROUP BY key, pool
			UNION ALL
			SELECT key, pool, 0, 0, 0, 0, count(*), sum(gpus * s)
				FROM (SELECT DISTINCT ON (job_id, run) ` + keyColumn + ` AS key, pool, gpus,
						extract(epoch FROM least(coalesce(job_end,
								CASE WHEN state IN ('released', 'failed') THEN updated_at ELSE now() END), $3)
							- greatest(job_start, $2))::float8 AS s
					FROM juice_reservations WHERE cluster = $1 AND job_start IS NOT NULL AND job_start < $3
					ORDER BY job_id, run, job_end DESC NULLS LAST) charged
				WHERE s > 0 GROUP BY key, pool) u
		GROUP BY key, pool ORDER BY key, pool`
}

// The leader lease.
const (
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

// sqlStrings writes constant strings of Go's as a SQL list of literals: 'A', 'B'. Only for the package's own
// constants, never for input.
func sqlStrings(vals []string) string {
	quoted := make([]string, len(vals))
	for i, v := range vals {
		quoted[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
	}
	return strings.Join(quoted, ", ")
}
