-- An operator cancels a job that has not started: PENDING -> DEAD with reason "cancelled". A
-- RUNNING job is never cancelled underneath its handler. The job is also marked skipped, so in
-- strict mode a cancelled job never blocks its key (ON_DEAD = 'block' is for failures).
-- params: ?1 id, ?2 now
UPDATE job
SET status = 'DEAD', last_error = 'cancelled', finished_at = ?2, updated_at = ?2, skipped_at = ?2, passed_at = ?2
WHERE id = ?1 AND status = 'PENDING'
RETURNING *
