-- GET /metrics (design §27): per type and limit key, the earliest next_run_at of the PENDING jobs
-- due by ?1 that nothing but the consumer and their limit key hold back (as metrics_jobs.sql
-- judges the rest: not a paused ordering key's, not waiting on a dependency, only a key's head,
-- a DEAD job in no one's way under ON_DEAD 'skip').
-- The limit key's state lives in its own shard: the ledger counts such a job as due only when no
-- shard says its limit key holds it (held_limit_keys.sql), so pausing a tenant pages no one.
-- params: ?1 now, ?2 on_dead
WITH open AS (
  SELECT id, status, type, ordering_key, limit_key, seq, next_run_at FROM job INDEXED BY job_open
  WHERE finished_at IS NULL AND seq IS NULL
  UNION ALL
  SELECT id, status, type, ordering_key, limit_key, seq, next_run_at FROM job INDEXED BY job_key_open
  WHERE seq IS NOT NULL AND passed_at IS NULL AND finished_at IS NULL)
SELECT type, limit_key, min(next_run_at) AS oldest_due
FROM open
WHERE status = 'PENDING' AND next_run_at <= ?1 AND limit_key IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM key_pause WHERE key_pause.ordering_key = open.ordering_key)
  AND NOT EXISTS (SELECT 1 FROM job_wait WHERE job_wait.job_id = open.id)
  AND (open.seq IS NULL OR NOT EXISTS (
    SELECT 1 FROM job AS e WHERE e.ordering_key = open.ordering_key AND e.seq IS NOT NULL
      AND e.passed_at IS NULL AND e.seq < open.seq AND NOT (e.status = 'DEAD' AND ?2 = 'skip')))
GROUP BY type, limit_key
