-- juice-slurm schema, version 1. Applied once, in a transaction, by Store.Migrate.

-- One row per reservation of a run (cluster, job id, restart count). A run has at most one reservation that is
-- not released: a released run (held, say) may be reserved again, a failed one only through a new run.
CREATE TABLE juice_reservations (
    id            uuid PRIMARY KEY,           -- also the idempotency key sent to the Juice Controller
    cluster       text        NOT NULL,
    job_id        bigint      NOT NULL,
    run           integer     NOT NULL,
    request       text        NOT NULL,       -- canonical form, juice:v1:...
    pool          text        NOT NULL,
    gpus          integer     NOT NULL,
    vram          bigint      NOT NULL DEFAULT 0,
    user_name     text        NOT NULL DEFAULT '',
    partition     text        NOT NULL DEFAULT '',
    state         text        NOT NULL CHECK (state IN ('pending','requesting','waiting','ready','releasing','released','failed')),
    reason        text        NOT NULL DEFAULT '',
    fail_reason   text        NOT NULL DEFAULT '',
    wanted        boolean     NOT NULL,
    requested     boolean     NOT NULL DEFAULT false,
    session_id    text        NOT NULL DEFAULT '',
    agent_address text        NOT NULL DEFAULT '',
    sealed        bytea,
    job_state     text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    ready_at      timestamptz,
    version       bigint      NOT NULL DEFAULT 1
);
CREATE UNIQUE INDEX juice_reservations_live_run ON juice_reservations (cluster, job_id, run) WHERE state <> 'released';
CREATE INDEX juice_reservations_open ON juice_reservations (state) WHERE state NOT IN ('released', 'failed');
CREATE INDEX juice_reservations_job ON juice_reservations (cluster, job_id);

-- The history of every reservation: each state change, and each change of what is wanted, with its reason.
CREATE TABLE juice_events (
    id             bigserial PRIMARY KEY,
    reservation_id uuid        NOT NULL REFERENCES juice_reservations (id) ON DELETE CASCADE,
    at             timestamptz NOT NULL DEFAULT now(),
    from_state     text        NOT NULL,
    to_state       text        NOT NULL,
    event          text        NOT NULL,
    reason         text        NOT NULL
);
CREATE INDEX juice_events_reservation ON juice_events (reservation_id, id);

-- The leader lease: one row per lease name, held by one replica until expires_at. A row, not a session advisory
-- lock, so that a pooler between us and PostgreSQL cannot make two leaders, and who leads is visible.
CREATE TABLE juice_leases (
    name        text PRIMARY KEY,
    holder      text        NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
