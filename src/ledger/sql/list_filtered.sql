-- A page of jobs filtered by any of status, type, ordering key and priority, newest first, after
-- a (created_at, id) cursor. Walks the created_at index and filters (lists by status alone use
-- list.sql's index). ?1 status, ?2 type, ?3 ordering_key (each NULL for any), ?4 cursor
-- created_at or NULL, ?5 cursor id, ?6 limit, ?7 priority or NULL
-- Lists never read a payload or a result (each up to 128 KB): a page of 200 would be 50 MB.
-- GET /jobs/{id} reads them (get.sql).
-- params: ?1 status, ?2 type, ?3 ordering_key, ?4 cursor_at, ?5 cursor_id, ?6 limit, ?7 priority
SELECT id, type, status, ordering_key, dedupe_key, attempts, max_attempts, deferrals, snoozes,
       lease_owner, lease_until, next_run_at, last_error, created_at, updated_at, finished_at, seq,
       skipped_at, priority, passed_at, started_at, ran_by, http_status
FROM job
WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR type = ?2) AND (?3 IS NULL OR ordering_key = ?3)
  AND (?7 IS NULL OR priority = ?7)
  AND (?4 IS NULL OR created_at < ?4 OR (created_at = ?4 AND id < ?5))
ORDER BY created_at DESC, id DESC
LIMIT ?6
