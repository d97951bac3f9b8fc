-- A claimed job that was not run (its key is held behind a failure): back to PENDING, the claim's
-- attempt given back, counted as a deferral. Only by the lease owner.
-- params: ?1 id, ?2 lease_owner, ?3 now, ?4 next_run_at
UPDATE job
SET status = 'PENDING', attempts = attempts - 1, deferrals = deferrals + 1,
    lease_owner = NULL, lease_until = NULL, next_run_at = ?4, updated_at = ?3
WHERE id = ?1 AND status = 'RUNNING' AND lease_owner = ?2 AND attempts > 0
RETURNING *
