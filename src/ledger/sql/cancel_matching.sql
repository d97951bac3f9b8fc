-- An operator cancels PENDING jobs matching a filter (design §22.2), at most ?8 of them, oldest
-- submission first: each DEAD "cancelled" and skipped, as cancel.sql makes one, so in strict mode a
-- key moves past its cancelled jobs exactly as after a skip. RUNNING jobs are left to run (a cancel
-- of one asks it to stop: POST /jobs/{id}/cancel). Each filter is NULL for any: ?1 type,
-- ?2 ordering_key, ?3 limit_key, ?4 text the job's last error contains, ?5 submitted at or after
-- (ms), ?6 submitted before (ms). PENDING jobs are found through the open jobs' indexes.
-- params: ?1 type, ?2 ordering_key, ?3 limit_key, ?4 error, ?5 from, ?6 to, ?7 now, ?8 limit
UPDATE job
SET status = 'DEAD', last_error = 'cancelled', finished_at = ?7, skipped_at = ?7, passed_at = ?7,
    cancel_requested_at = ?7, updated_at = ?7
WHERE id IN (
    SELECT id FROM job
    WHERE id IN (
        SELECT id FROM job WHERE finished_at IS NULL AND seq IS NULL AND status = 'PENDING'
        UNION ALL
        SELECT id FROM job WHERE seq IS NOT NULL AND passed_at IS NULL AND status = 'PENDING')
      AND (?1 IS NULL OR type = ?1) AND (?2 IS NULL OR ordering_key = ?2)
      AND (?3 IS NULL OR limit_key = ?3) AND (?4 IS NULL OR instr(last_error, ?4) > 0)
      AND (?5 IS NULL OR created_at >= ?5) AND (?6 IS NULL OR created_at < ?6)
    ORDER BY created_at, id
    LIMIT ?8)
  AND status = 'PENDING'
RETURNING *
