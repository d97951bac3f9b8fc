-- Claim a job for one run. Inserts it RUNNING, or moves an existing row to RUNNING when it is
-- PENDING and due, or RUNNING under an expired lease with attempts left (out of attempts, the
-- reaper makes it DEAD: the dead run counted). No row back = not claimed (the caller reads
-- the row to learn why). A new job whose dedupe key is active in another job is not inserted.
-- A job whose cancel was requested (cancel.sql) is never claimed again, nor one waiting on a
-- dependency (job_wait, design §24).
-- A job of a paused ordering key (key_pause, design §20.11) is not claimed: a new one is inserted
-- PENDING and due (its row comes back PENDING), an existing one is left as it is. A new job's
-- created_at is when its message was sent (?15, never after now): a key's jobs recorded in one
-- batch keep their send order (a paused key's, sent again on resume, design §20.11).
-- params: ?1 id, ?2 type, ?3 ordering_key, ?4 dedupe_key, ?5 payload, ?6 max_attempts, ?7 lease_owner, ?8 lease_until, ?9 now, ?10 due_before, ?11 priority, ?12 limit_key, ?13 deadline_at, ?14 timeout_seconds, ?15 sent_at
INSERT INTO job (id, type, status, ordering_key, dedupe_key, payload, attempts, max_attempts,
                 deferrals, lease_owner, lease_until, next_run_at, created_at, updated_at, priority, started_at,
                 limit_key, deadline_at, timeout_seconds)
SELECT ?1, ?2, CASE WHEN paused THEN 'PENDING' ELSE 'RUNNING' END, ?3, ?4, ?5, 1 - paused, ?6, 0,
       CASE WHEN paused THEN NULL ELSE ?7 END, CASE WHEN paused THEN NULL ELSE ?8 END, ?9, min(?15, ?9), ?9, ?11,
       CASE WHEN paused THEN NULL ELSE ?9 END, ?12, ?13, ?14
FROM (SELECT EXISTS (SELECT 1 FROM key_pause WHERE ordering_key = ?3) AS paused)
WHERE ?4 IS NULL OR NOT EXISTS (
  SELECT 1 FROM job WHERE dedupe_key = ?4 AND finished_at IS NULL AND superseded_at IS NULL AND id <> ?1)
ON CONFLICT (id) DO UPDATE SET
  status = 'RUNNING',
  attempts = job.attempts + 1,
  lease_owner = excluded.lease_owner,
  lease_until = excluded.lease_until,
  updated_at = excluded.updated_at,
  started_at = excluded.started_at,
  parked = 0
WHERE ((job.status = 'PENDING' AND job.next_run_at <= ?10)
       OR (job.status = 'RUNNING' AND job.lease_until <= ?9 AND job.attempts < job.max_attempts))
  AND job.cancel_requested_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM key_pause WHERE ordering_key = job.ordering_key)
  AND NOT EXISTS (SELECT 1 FROM job_wait WHERE job_wait.job_id = job.id)
RETURNING *
