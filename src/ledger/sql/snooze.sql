-- A run that snoozed (src/handlers: JobError::Snooze): back to PENDING until ?4 without spending
-- its attempt (the claim's is given back), the snooze counted, and the payload replaced when the
-- handler gave the next run's (?5, already sealed when the job is sealed). Only by the lease owner.
-- params: ?1 id, ?2 lease_owner, ?3 now, ?4 next_run_at, ?5 payload, ?6 started_at
UPDATE job
SET status = 'PENDING', attempts = attempts - 1, snoozes = snoozes + 1, payload = coalesce(?5, payload),
    lease_owner = NULL, lease_until = NULL, next_run_at = ?4, updated_at = ?3, started_at = coalesce(?6, started_at)
WHERE id = ?1 AND status = 'RUNNING' AND lease_owner = ?2 AND attempts > 0
RETURNING *
