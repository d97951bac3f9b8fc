-- GET /metrics (design §27): open jobs per status and type through the open indexes (their rows
-- are few), and DEAD jobs per type from job_tally (kept by the job table's triggers: a few rows,
-- whatever the history); per open status and type, the earliest
-- next_run_at of its PENDING jobs due by ?1 that nothing but the consumer holds back (the oldest
-- due job): not a paused key's, not one waiting on a dependency, and of a key's jobs only the
-- head (the rest wait for it, and a blocked key's for an operator; under ON_DEAD 'skip' a DEAD
-- job is in no one's way, as head.sql judges), and not a limit key's (its flow control may hold
-- it: metrics_limited_due.sql, judged against every shard's limit keys).
-- DONE jobs are counted by
-- counts.sql, from the same tally.
-- params: ?1 now, ?2 on_dead
WITH open AS (
  SELECT id, status, type, ordering_key, limit_key, seq, next_run_at FROM job INDEXED BY job_open
  WHERE finished_at IS NULL AND seq IS NULL
  UNION ALL
  SELECT id, status, type, ordering_key, limit_key, seq, next_run_at FROM job INDEXED BY job_key_open
  WHERE seq IS NOT NULL AND passed_at IS NULL AND finished_at IS NULL)
SELECT status, type, count(*) AS n,
       min(CASE WHEN status = 'PENDING' AND next_run_at <= ?1 AND open.limit_key IS NULL
                 AND NOT EXISTS (SELECT 1 FROM key_pause WHERE key_pause.ordering_key = open.ordering_key)
                 AND NOT EXISTS (SELECT 1 FROM job_wait WHERE job_wait.job_id = open.id)
                 AND (open.seq IS NULL OR NOT EXISTS (
                   SELECT 1 FROM job AS e WHERE e.ordering_key = open.ordering_key AND e.seq IS NOT NULL
                     AND e.passed_at IS NULL AND e.seq < open.seq AND NOT (e.status = 'DEAD' AND ?2 = 'skip')))
            THEN next_run_at END) AS oldest_due
FROM open GROUP BY status, type
UNION ALL
SELECT 'DEAD', nullif(type, ''), n, NULL FROM job_tally WHERE status = 'DEAD' AND n > 0
