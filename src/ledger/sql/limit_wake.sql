-- Flow control (design §20): the oldest ?2 jobs in a limit key's line leave it, to be sent again
-- (their rows are in their own shards: each comes with its route). None while the key is paused.
-- params: ?1 limit_key, ?2 limit
DELETE FROM limit_wait
WHERE limit_key = ?1
  AND job_id IN (SELECT job_id FROM limit_wait WHERE limit_key = ?1 ORDER BY since, job_id LIMIT ?2)
  AND NOT EXISTS (SELECT 1 FROM limit_state WHERE limit_key = ?1 AND paused = 1)
RETURNING job_id, route
