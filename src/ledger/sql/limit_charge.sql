-- Flow control (design §20): after a permit was granted (limit_acquire.sql, same batch), the
-- throttle's theoretical arrival time moves on by one interval, and a breaker past its cool-down
-- names this job its probe. Nothing is written for a key with neither.
-- params: ?1 limit_key, ?2 job_id, ?3 now, ?4 until, ?5 interval_us
UPDATE limit_state
SET tat_us = CASE WHEN (CASE WHEN overridden = 1 THEN interval_us ELSE ?5 END) IS NULL THEN tat_us
               ELSE max(tat_us, ?3 * 1000) + (CASE WHEN overridden = 1 THEN interval_us ELSE ?5 END) END,
    probe = CASE WHEN open_until IS NOT NULL THEN ?2 ELSE probe END,
    updated_at = ?3
WHERE limit_key = ?1
  AND ((CASE WHEN overridden = 1 THEN interval_us ELSE ?5 END) IS NOT NULL OR open_until IS NOT NULL)
  AND EXISTS (SELECT 1 FROM limit_permit WHERE limit_key = ?1 AND job_id = ?2 AND until = ?4)
