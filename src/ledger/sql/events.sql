-- A job's history, oldest first. ?1 job_id
-- params: ?1 job_id
SELECT n, at, kind, actor, attempt, started_at, outcome, error, http_status
FROM job_event WHERE job_id = ?1
ORDER BY n
