-- GET /metrics (design §27): open jobs per status and type through the open indexes (their rows
-- are few), and DEAD jobs per type through job_dead; per open status and type, the earliest
-- next_run_at of its PENDING jobs due by ?1 (the oldest due job). DONE jobs are not counted by
-- type: that would read every row of the table on every scrape (counts.sql counts them).
-- params: ?1 now
WITH open AS (
  SELECT status, type, next_run_at FROM job INDEXED BY job_open WHERE finished_at IS NULL AND seq IS NULL
  UNION ALL
  SELECT status, type, next_run_at FROM job INDEXED BY job_key_open
  WHERE seq IS NOT NULL AND passed_at IS NULL AND finished_at IS NULL)
SELECT status, type, count(*) AS n,
       min(CASE WHEN status = 'PENDING' AND next_run_at <= ?1 THEN next_run_at END) AS oldest_due
FROM open GROUP BY status, type
UNION ALL
SELECT 'DEAD', type, count(*), NULL FROM job INDEXED BY job_dead WHERE status = 'DEAD' GROUP BY type
