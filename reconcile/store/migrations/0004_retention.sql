-- juice-slurm schema, version 4: retention. Store.Prune deletes the reservations of runs that ended before a
-- cutoff (their events go with them: ON DELETE CASCADE), oldest first, in batches; this index finds them without
-- reading the open rows or the whole table.
CREATE INDEX juice_reservations_ended ON juice_reservations (cluster, updated_at) WHERE state IN ('released', 'failed');
