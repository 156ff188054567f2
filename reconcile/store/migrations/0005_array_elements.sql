-- juice-slurm schema, version 5: job array elements reserved ahead. slurmctld gives an array's element a job id
-- of its own only when it starts it, so an element's reservation is keyed by (array job id, task id, run) and its
-- job_id stays NULL until the element is seen as its own job and the reservation is bound to it (Store.Bind).
ALTER TABLE juice_reservations ALTER COLUMN job_id DROP NOT NULL;
ALTER TABLE juice_reservations ADD COLUMN array_job_id bigint, ADD COLUMN array_task_id bigint;
ALTER TABLE juice_reservations ADD CONSTRAINT juice_reservations_named
    CHECK (job_id IS NOT NULL OR array_job_id IS NOT NULL AND array_task_id IS NOT NULL);
-- An element has at most one reservation that blocks a new one, bound or not (blocksNew, as juice_reservations_live_run).
CREATE UNIQUE INDEX juice_reservations_live_element ON juice_reservations (cluster, array_job_id, array_task_id, run)
    WHERE state <> 'released' OR run_over;
-- The job id the sealed session file is bound to: the prolog is handed the file only when it is the run's job's.
-- A reservation sealed before it was bound is sealed again by the reconciler once it is.
ALTER TABLE juice_reservations ADD COLUMN sealed_job_id bigint;
UPDATE juice_reservations SET sealed_job_id = job_id WHERE sealed IS NOT NULL;
