-- The RUNNING jobs of an invocation known to have died (a Rust handler of its panicked, see
-- src/panics.rs), without waiting for their leases to expire: back to PENDING, or DEAD when out
-- of attempts or cancelled, as the reaper does. Attempts are kept: a run may have done part of its work.
-- Found as reap.sql finds RUNNING jobs (through job_open and job_key_open).
-- params: ?1 now, ?2 lease_owner, ?3 why
UPDATE job
SET status = CASE WHEN attempts >= max_attempts OR cancel_requested_at IS NOT NULL THEN 'DEAD' ELSE 'PENDING' END,
    finished_at = CASE WHEN attempts >= max_attempts OR cancel_requested_at IS NOT NULL THEN ?1 END,
    skipped_at = CASE WHEN cancel_requested_at IS NOT NULL THEN ?1 ELSE skipped_at END,
    passed_at = CASE WHEN cancel_requested_at IS NOT NULL THEN ?1 ELSE passed_at END,
    last_error = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE ?3 || coalesce('; before: ' || last_error, '') END,
    lease_owner = NULL, lease_until = NULL, next_run_at = ?1, updated_at = ?1
WHERE id IN (
    SELECT id FROM job
    WHERE finished_at IS NULL AND seq IS NULL AND next_run_at <= ?1 AND status = 'RUNNING' AND lease_owner = ?2
    UNION ALL
    SELECT id FROM job
    WHERE seq IS NOT NULL AND passed_at IS NULL AND status = 'RUNNING' AND lease_owner = ?2)
  AND status = 'RUNNING' AND lease_owner = ?2
RETURNING *
