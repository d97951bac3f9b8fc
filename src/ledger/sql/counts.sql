-- Jobs per status (statuses with none are absent; the caller fills in zeros), without reading the
-- table itself (its rows carry payloads): open jobs through the open indexes (their rows are
-- read for their status: there are few), DEAD ones counted in job_dead, and DONE as what is left
-- of the count of job_created's entries.
-- params: none
WITH open AS (
  SELECT status FROM job INDEXED BY job_open WHERE finished_at IS NULL AND seq IS NULL
  UNION ALL
  SELECT status FROM job INDEXED BY job_key_open
  WHERE seq IS NOT NULL AND passed_at IS NULL AND finished_at IS NULL),
dead AS (SELECT count(*) AS n FROM job WHERE status = 'DEAD'),
every AS (SELECT count(*) AS n FROM job INDEXED BY job_created)
SELECT status, count(*) AS n FROM open GROUP BY status
UNION ALL
SELECT 'DEAD', n FROM dead WHERE n > 0
UNION ALL
SELECT 'DONE', every.n - dead.n - (SELECT count(*) FROM open) FROM every, dead
WHERE every.n - dead.n - (SELECT count(*) FROM open) > 0
