-- juice-slurm schema, version 7: whether sessions other than the reservation's own may carry its key. Set when
-- the session was learnt on a later attempt than the first request (an earlier answer may have been lost, and a
-- controller without idempotency may have booked a second session); only then does the reconciler look through
-- the pool for orphans when the session becomes ready or is released, instead of walking every agent each time.
ALTER TABLE juice_reservations ADD COLUMN maybe_orphans boolean NOT NULL DEFAULT false;
-- Rows written before this version cannot say: the open ones that asked the controller are treated as unsure.
UPDATE juice_reservations SET maybe_orphans = true WHERE requested AND state NOT IN ('released', 'failed');
