-- RUNNING -> DONE, only by the lease owner, keeping what the run returned. The row describes the
-- successful run itself (who ran it, when it started and ended, its HTTP status): no history row
-- is written for it (event.sql). Its key moves past it. `waited`: jobs wait on it (design §24).
-- params: ?1 id, ?2 lease_owner, ?3 now, ?4 result, ?5 http_status, ?6 started_at
UPDATE job
SET status = 'DONE', lease_owner = NULL, lease_until = NULL, finished_at = ?3, passed_at = ?3,
    updated_at = ?3, result = ?4, ran_by = ?2, http_status = ?5,
    next_run_at = CASE WHEN started_at = next_run_at THEN coalesce(?6, next_run_at) ELSE next_run_at END,
    started_at = coalesce(?6, started_at)
WHERE id = ?1 AND status = 'RUNNING' AND lease_owner = ?2
RETURNING *, EXISTS (SELECT 1 FROM job_waiter WHERE job_waiter.on_id = job.id) AS waited
