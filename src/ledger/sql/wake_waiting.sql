-- Lock mode, after an operator cancelled a job that held its key: the key's oldest PENDING job
-- that was put off because the key was held (deferrals > 0) becomes due now, so the message sent
-- to wake it runs it (taking over the finished holder's lock) instead of waiting out the hold.
-- A job that was never put off keeps its own delay. Served by job_ordering_key.
-- ?1 ordering_key, ?2 now
UPDATE job
SET next_run_at = min(next_run_at, ?2), updated_at = ?2
WHERE id = (SELECT id FROM job
            WHERE ordering_key = ?1 AND status = 'PENDING'
            ORDER BY created_at, id
            LIMIT 1)
  AND deferrals > 0
RETURNING *
