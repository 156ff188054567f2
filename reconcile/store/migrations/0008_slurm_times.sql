-- juice-slurm schema, version 8: when Slurm started and ended each run's job, as slurmrestd gives them (the job's
-- start_time and end_time, whole seconds, the figures sacct and sreport charge a license by): juice-slurm report
-- shows the GPU-hours Slurm charged the pools' licenses beside the hours the sessions were held. NULL until the
-- poller saw them; every reservation of a run carries the same.
ALTER TABLE juice_reservations ADD COLUMN job_start timestamptz, ADD COLUMN job_end timestamptz;
