-- A page of jobs of every status, newest first, after a (created_at, id) cursor.
-- Lists never read a payload or a result (each up to 128 KB): a page of 200 would be 50 MB.
-- GET /jobs/{id} reads them (get.sql).
-- params: ?1 cursor_at, ?2 cursor_id, ?3 limit
SELECT id, type, status, ordering_key, dedupe_key, attempts, max_attempts, deferrals, snoozes,
       lease_owner, lease_until, next_run_at, last_error, created_at, updated_at, finished_at, seq,
       skipped_at, priority, passed_at, started_at, ran_by, http_status
FROM job
WHERE (?1 IS NULL OR created_at < ?1 OR (created_at = ?1 AND id < ?2))
ORDER BY created_at DESC, id DESC
LIMIT ?3
