-- A claimed job that was not run (its key is held behind a failure): back to PENDING, the claim's
-- attempt given back, counted as a deferral. Only by the lease owner. ?5 = 1: parked in its limit
-- key's line (strict mode, design §20.10), so its wake-up may make it due.
-- params: ?1 id, ?2 lease_owner, ?3 now, ?4 next_run_at, ?5 parked
UPDATE job
SET status = 'PENDING', attempts = attempts - 1, deferrals = deferrals + 1,
    lease_owner = NULL, lease_until = NULL, next_run_at = ?4, updated_at = ?3, parked = ?5
WHERE id = ?1 AND status = 'RUNNING' AND lease_owner = ?2 AND attempts > 0
RETURNING *
