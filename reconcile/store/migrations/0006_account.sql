-- juice-slurm schema, version 6: policy and accounting. The Slurm account a run's job is charged to (the site
-- policy's pool.<name>.accounts, and juice-slurm report --by account); empty for runs reserved before.
ALTER TABLE juice_reservations ADD COLUMN account text NOT NULL DEFAULT '';
-- juice-slurm report reads the runs whose session was ready in a period: by the time it became ready.
CREATE INDEX juice_reservations_ready ON juice_reservations (cluster, ready_at) WHERE ready_at IS NOT NULL;
