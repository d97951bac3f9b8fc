-- A job that can never run (unreadable body, delivery attempts exhausted, duplicate dedupe key):
-- inserted DEAD, or an existing PENDING row / RUNNING row under an expired lease moved to DEAD.
-- DONE rows and live leases are left alone.
-- params: ?1 id, ?2 type, ?3 ordering_key, ?4 dedupe_key, ?5 payload, ?6 max_attempts, ?7 now, ?8 error, ?9 priority, ?10 limit_key, ?11 deadline_at, ?12 timeout_seconds
INSERT INTO job (id, type, status, ordering_key, dedupe_key, payload, attempts, max_attempts,
                 deferrals, next_run_at, last_error, created_at, updated_at, finished_at, priority,
                 limit_key, deadline_at, timeout_seconds)
VALUES (?1, ?2, 'DEAD', ?3, ?4, ?5, 0, ?6, 0, ?7, ?8, ?7, ?7, ?7, ?9, ?10, ?11, ?12)
ON CONFLICT (id) DO UPDATE SET
  status = 'DEAD', last_error = excluded.last_error, lease_owner = NULL, lease_until = NULL,
  finished_at = excluded.finished_at, updated_at = excluded.updated_at
WHERE job.status = 'PENDING' OR (job.status = 'RUNNING' AND job.lease_until <= ?7)
RETURNING *
