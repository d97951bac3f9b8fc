-- Lock mode, after an operator cancelled a job that held its key: the key's oldest PENDING job
-- that was put off because the key was held (deferrals > 0) becomes due now, so the message sent
-- to wake it runs it (taking over the finished holder's lock) instead of waiting out the hold.
-- A job that was never put off keeps its own delay, and so does one waiting for its own retry or
-- snooze (it has run: a wake-up must never cut its backoff short; the simulation's cancels found
-- a snoozed job woken early). Reads the key's first open job of each kind:
-- unsequenced (job_lock_key) and sequenced (API submissions, job_key_open).
-- params: ?1 ordering_key, ?2 now
UPDATE job
SET next_run_at = min(next_run_at, ?2), updated_at = ?2
WHERE id = (SELECT id FROM (
              SELECT * FROM (SELECT id, created_at FROM job
                             WHERE ordering_key = ?1 AND seq IS NULL AND finished_at IS NULL AND status = 'PENDING'
                             ORDER BY created_at, id LIMIT 1)
              UNION ALL
              SELECT * FROM (SELECT id, created_at FROM job
                             WHERE ordering_key = ?1 AND seq IS NOT NULL AND passed_at IS NULL AND status = 'PENDING'
                             ORDER BY seq LIMIT 1))
            ORDER BY created_at, id
            LIMIT 1)
  AND deferrals > 0 AND attempts = 0 AND snoozes = 0
RETURNING *
