-- RUNNING jobs whose lease expired (their runner died): back to PENDING, or DEAD when out of
-- attempts. Attempts are kept: the dead run counted. Unsequenced jobs are found through job_open
-- (a RUNNING job was due when claimed), sequenced ones through job_key_open. ?1 now, ?2 limit
-- params: ?1 now, ?2 limit
UPDATE job
SET status = CASE WHEN attempts >= max_attempts THEN 'DEAD' ELSE 'PENDING' END,
    finished_at = CASE WHEN attempts >= max_attempts THEN ?1 END,
    last_error = 'lease of ' || lease_owner || ' expired' || coalesce('; before: ' || last_error, ''),
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
