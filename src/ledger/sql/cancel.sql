-- An operator cancels a job (design §22.1). A PENDING job becomes DEAD with reason "cancelled"
-- at once. A RUNNING job is asked to stop: cancel_requested_at is set, its run learns of it from
-- the ledger (cancel_asked.sql) and stops, and whatever the run returns, its transition ends the
-- job DEAD "cancelled" (settle_cancelled.sql); it is never claimed again (claim.sql), and an
-- expired lease ends it DEAD too (reap.sql). Either way the job is marked skipped, so in strict
-- mode a cancelled job never blocks its key (ON_DEAD = 'block' is for failures). SQLite reads
-- every SET expression from the row as it was, so `status` below is the status before.
-- params: ?1 id, ?2 now
UPDATE job
SET status = CASE WHEN status = 'PENDING' THEN 'DEAD' ELSE status END,
    last_error = CASE WHEN status = 'PENDING' THEN 'cancelled' ELSE last_error END,
    finished_at = CASE WHEN status = 'PENDING' THEN ?2 ELSE finished_at END,
    skipped_at = CASE WHEN status = 'PENDING' THEN ?2 ELSE skipped_at END,
    passed_at = CASE WHEN status = 'PENDING' THEN ?2 ELSE passed_at END,
    cancel_requested_at = ?2, updated_at = ?2
WHERE id = ?1 AND (status = 'PENDING' OR (status = 'RUNNING' AND cancel_requested_at IS NULL))
RETURNING *
