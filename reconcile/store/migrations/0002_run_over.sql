-- A run whose job ended, vanished or was requeued (or that an administrator released) is over: it never gets
-- another reservation, even when a poller's older listing still shows its job running. Only a reservation
-- released while its job is held leaves the run open, so that it is reserved again once the job is let go.
ALTER TABLE juice_reservations ADD COLUMN run_over boolean NOT NULL DEFAULT false;
DROP INDEX juice_reservations_live_run;
CREATE UNIQUE INDEX juice_reservations_live_run ON juice_reservations (cluster, job_id, run)
    WHERE state <> 'released' OR run_over;
