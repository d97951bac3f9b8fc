-- A message deferred because its key's lock is held: recorded (or kept) PENDING, deferrals + 1,
-- attempts untouched. An existing row's next_run_at is left to keep_due.sql: setting it here on
-- every poll of a held key would rewrite its job_open entry each time (a row written more).
-- params: ?1 id, ?2 type, ?3 ordering_key, ?4 dedupe_key, ?5 payload, ?6 max_attempts, ?7 now, ?8 next_run_at, ?9 priority, ?10 limit_key, ?11 deadline_at, ?12 timeout_seconds
INSERT INTO job (id, type, status, ordering_key, dedupe_key, payload, attempts, max_attempts,
                 deferrals, next_run_at, created_at, updated_at, priority, limit_key, deadline_at, timeout_seconds)
SELECT ?1, ?2, 'PENDING', ?3, ?4, ?5, 0, ?6, 1, ?8, ?7, ?7, ?9, ?10, ?11, ?12
WHERE ?4 IS NULL OR NOT EXISTS (
  SELECT 1 FROM job WHERE dedupe_key = ?4 AND finished_at IS NULL AND superseded_at IS NULL AND id <> ?1)
ON CONFLICT (id) DO UPDATE SET
  deferrals = job.deferrals + 1,
  updated_at = excluded.updated_at
WHERE job.status = 'PENDING'
RETURNING *
