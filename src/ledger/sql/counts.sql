-- Jobs per status (statuses with none are absent; the caller fills in zeros), at the cost of the
-- open work, whatever the history: open jobs through the open indexes (their rows are read for
-- their status: there are few), finished ones (DONE and DEAD) from job_tally, which the job
-- table's triggers keep in the same transaction as each move (migration 0020).
-- params: none
WITH open AS (
  SELECT status FROM job INDEXED BY job_open WHERE finished_at IS NULL AND seq IS NULL
  UNION ALL
  SELECT status FROM job INDEXED BY job_key_open
  WHERE seq IS NOT NULL AND passed_at IS NULL AND finished_at IS NULL)
SELECT status, count(*) AS n FROM open GROUP BY status
UNION ALL
SELECT status, sum(n) FROM job_tally GROUP BY status HAVING sum(n) > 0
