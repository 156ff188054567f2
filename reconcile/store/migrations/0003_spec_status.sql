-- Spec apart from status. Observers (the poller, the hooks, the admin CLI) write only the spec columns: wanted and
-- why not (want_reason), run_over, and what Slurm said of the job (job_state, job_reason); their writes do not move
-- version, which counts the reconciler's status writes only, so an observer never makes a transition conflict.
ALTER TABLE juice_reservations ADD COLUMN want_reason text NOT NULL DEFAULT '';
ALTER TABLE juice_reservations ADD COLUMN job_reason text NOT NULL DEFAULT '';
-- A final reservation needs no session file any more: nobody may open it again.
UPDATE juice_reservations SET sealed = NULL WHERE state IN ('released', 'failed') AND sealed IS NOT NULL;
-- Every query names its cluster.
DROP INDEX juice_reservations_open;
CREATE INDEX juice_reservations_open ON juice_reservations (cluster, created_at) WHERE state NOT IN ('released', 'failed');
