-- RUNNING jobs whose lease expired (their runner died): back to PENDING, or DEAD when out of
-- attempts or cancelled (an operator asked it to stop: DEAD "cancelled", skipped, design §22.1).
-- Attempts are kept: the dead run counted. Unsequenced jobs are found through job_open
-- (a RUNNING job was due when claimed), sequenced ones through job_key_open. ?1 now, ?2 limit
-- params: ?1 now, ?2 limit
UPDATE job
SET status = CASE WHEN attempts >= max_attempts OR cancel_requested_at IS NOT NULL THEN 'DEAD' ELSE 'PENDING' END,
    finished_at = CASE WHEN attempts >= max_attempts OR cancel_requested_at IS NOT NULL THEN ?1 END,
    skipped_at = CASE WHEN cancel_requested_at IS NOT NULL THEN ?1 ELSE skipped_at END,
    passed_at = CASE WHEN cancel_requested_at IS NOT NULL THEN ?1 ELSE passed_at END,
    last_error = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'lease of ' || lease_owner || ' expired' || coalesce('; before: ' || last_error, '') END,
    lease_owner = NULL, lease_until = NULL, next_run_at = ?1, updated_at = ?1
WHERE id IN (
    SELECT id FROM (
      SELECT id, lease_until FROM job
      WHERE finished_at IS NULL AND seq IS NULL AND next_run_at <= ?1 AND status = 'RUNNING' AND lease_until <= ?1
      UNION ALL
      SELECT id, lease_until FROM job
      WHERE seq IS NOT NULL AND passed_at IS NULL AND status = 'RUNNING' AND lease_until <= ?1)
    ORDER BY lease_until LIMIT ?2)
  AND status = 'RUNNING' AND lease_until <= ?1
RETURNING *
