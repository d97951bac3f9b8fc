-- A page of PENDING or RUNNING jobs, newest first, after a (created_at, id) cursor: read through
-- the open indexes (job_open, job_key_open) and sorted; open jobs are few next to finished ones
-- (left to itself the planner walks job_created to skip the sort, reading every finished job).
-- Lists never read a payload or a result (each up to 128 KB): a page of 200 would be 50 MB.
-- GET /jobs/{id} reads them (get.sql).
-- params: ?1 status, ?2 cursor_at, ?3 cursor_id, ?4 limit
SELECT * FROM (
  SELECT id, type, status, ordering_key, dedupe_key, attempts, max_attempts, deferrals, snoozes, lease_owner,
         lease_until, next_run_at, last_error, created_at, updated_at, finished_at, seq, skipped_at, priority,
         passed_at, started_at, ran_by, http_status
  FROM job INDEXED BY job_open WHERE finished_at IS NULL AND seq IS NULL AND status = ?1
  UNION ALL
  SELECT id, type, status, ordering_key, dedupe_key, attempts, max_attempts, deferrals, snoozes, lease_owner,
         lease_until, next_run_at, last_error, created_at, updated_at, finished_at, seq, skipped_at, priority,
         passed_at, started_at, ran_by, http_status
  FROM job INDEXED BY job_key_open WHERE seq IS NOT NULL AND passed_at IS NULL AND status = ?1)
WHERE (?2 IS NULL OR created_at < ?2 OR (created_at = ?2 AND id < ?3))
ORDER BY created_at DESC, id DESC
LIMIT ?4
