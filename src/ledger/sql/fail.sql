-- RUNNING -> PENDING (retry at next_run_at) or DEAD, only by the lease owner. The caller decides
-- which from the claimed row (src/retry.rs, called by src/consumer/executor.rs); the statement only applies it. `waited`: jobs
-- wait on it (design §24), released when it is DEAD.
-- params: ?1 id, ?2 lease_owner, ?3 now, ?4 status, ?5 next_run_at, ?6 error, ?7 started_at
UPDATE job
SET status = ?4, lease_owner = NULL, lease_until = NULL, next_run_at = ?5, last_error = ?6,
    finished_at = CASE WHEN ?4 = 'DEAD' THEN ?3 END, updated_at = ?3, started_at = coalesce(?7, started_at)
WHERE id = ?1 AND status = 'RUNNING' AND lease_owner = ?2 AND ?4 IN ('PENDING', 'DEAD')
RETURNING *, EXISTS (SELECT 1 FROM job_waiter WHERE job_waiter.on_id = job.id) AS waited
