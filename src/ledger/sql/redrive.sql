-- DEAD -> PENDING for another round: attempts reset, the old error kept in last_error, an
-- operator's skip undone (in strict mode a redriven head runs before the jobs behind it again).
-- Refused (no row) when the job has no readable payload (an unreadable body: it could never be
-- sent again) or its dedupe key is active in another job. ?1 id, ?2 now
UPDATE job
SET status = 'PENDING', attempts = 0, lease_owner = NULL, lease_until = NULL, next_run_at = ?2,
    finished_at = NULL, skipped_at = NULL, updated_at = ?2,
    last_error = 'redriven; before: ' || coalesce(last_error, '(none)')
WHERE id = ?1 AND status = 'DEAD' AND payload IS NOT NULL
  AND (dedupe_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM job AS other
    WHERE other.dedupe_key = job.dedupe_key AND other.status IN ('PENDING', 'RUNNING')
      AND other.id <> job.id))
RETURNING *
