-- juice-slurm schema, version 9: session hand-off. A session handed from one run to the next carries the first
-- run's key, whose reservation is released: the sweep and the license sync find the live run that holds it by its
-- session id instead (Store.Holding), on this index of the open rows.
CREATE INDEX juice_reservations_session ON juice_reservations (cluster, session_id) WHERE state NOT IN ('released', 'failed');
