-- An operator cancels the open jobs matching a filter (design §22.2), at most ?8 of them, oldest
-- submission first, each as cancel.sql cancels one: a PENDING job ends DEAD "cancelled" and
-- skipped, so in strict mode its key moves past it exactly as after a skip; a RUNNING one (a run
-- going on, or a job a strict chain claimed ahead) is asked to stop. Each filter is NULL for any:
-- ?1 type, ?2 ordering_key, ?3 limit_key, ?4 text the job's last error contains, ?5 submitted at
-- or after (ms), ?6 submitted before (ms). Open jobs are found through the open jobs' indexes.
-- params: ?1 type, ?2 ordering_key, ?3 limit_key, ?4 error, ?5 from, ?6 to, ?7 now, ?8 limit
UPDATE job
SET status = CASE WHEN status = 'PENDING' THEN 'DEAD' ELSE status END,
    last_error = CASE WHEN status = 'PENDING' THEN 'cancelled' ELSE last_error END,
    finished_at = CASE WHEN status = 'PENDING' THEN ?7 ELSE finished_at END,
    skipped_at = CASE WHEN status = 'PENDING' THEN ?7 ELSE skipped_at END,
    passed_at = CASE WHEN status = 'PENDING' THEN ?7 ELSE passed_at END,
    cancel_requested_at = ?7, updated_at = ?7
WHERE id IN (
    SELECT id FROM job
    WHERE id IN (
        SELECT id FROM job WHERE finished_at IS NULL AND seq IS NULL AND status IN ('PENDING', 'RUNNING')
        UNION ALL
        SELECT id FROM job WHERE seq IS NOT NULL AND passed_at IS NULL AND status IN ('PENDING', 'RUNNING'))
      AND (status = 'PENDING' OR cancel_requested_at IS NULL)
      AND (?1 IS NULL OR type = ?1) AND (?2 IS NULL OR ordering_key = ?2)
      AND (?3 IS NULL OR limit_key = ?3) AND (?4 IS NULL OR instr(last_error, ?4) > 0)
      AND (?5 IS NULL OR created_at >= ?5) AND (?6 IS NULL OR created_at < ?6)
    ORDER BY created_at, id
    LIMIT ?8)
  AND (status = 'PENDING' OR (status = 'RUNNING' AND cancel_requested_at IS NULL))
RETURNING *
