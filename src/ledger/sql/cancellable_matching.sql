-- How many open jobs match an operator's cancel filter and are not yet cancelled or asked to stop
-- (cancel_matching.sql's, with the same parameters but its time and limit): a dry run's count, and
-- what a call leaves for the next. Found through the open jobs' indexes (job_open, job_key_open),
-- never the table.
-- params: ?1 type, ?2 ordering_key, ?3 limit_key, ?4 error, ?5 from, ?6 to
SELECT count(*) AS matched, coalesce(sum(status = 'RUNNING'), 0) AS running FROM job
WHERE id IN (
    SELECT id FROM job WHERE finished_at IS NULL AND seq IS NULL AND status IN ('PENDING', 'RUNNING')
    UNION ALL
    SELECT id FROM job WHERE seq IS NOT NULL AND passed_at IS NULL AND status IN ('PENDING', 'RUNNING'))
  AND (status = 'PENDING' OR cancel_requested_at IS NULL)
  AND (?1 IS NULL OR type = ?1) AND (?2 IS NULL OR ordering_key = ?2)
  AND (?3 IS NULL OR limit_key = ?3) AND (?4 IS NULL OR instr(last_error, ?4) > 0)
  AND (?5 IS NULL OR created_at >= ?5) AND (?6 IS NULL OR created_at < ?6)
