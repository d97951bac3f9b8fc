-- Flow control (design §20): a job refused only by its limit key's throttle (not granted, not
-- parked, the key neither paused nor its breaker open) books the next free start: the later of
-- the throttle's next start and the last booking, and one interval on. limit_verdict.sql tells
-- the job to come back then, so a busy key's refused jobs come back spread over their turns.
-- params: ?1 limit_key, ?2 job_id, ?3 now, ?4 until, ?5 interval_us, ?6 tolerance_us
UPDATE limit_state
SET booked_us = max(booked_us, max(tat_us, ?3 * 1000) - coalesce(CASE WHEN overridden = 1 THEN tolerance_us ELSE ?6 END, 0))
                + (CASE WHEN overridden = 1 THEN interval_us ELSE ?5 END),
    updated_at = ?3
WHERE limit_key = ?1
  AND (CASE WHEN overridden = 1 THEN interval_us ELSE ?5 END) IS NOT NULL
  AND paused = 0
  AND (open_until IS NULL OR open_until <= ?3)
  AND NOT EXISTS (SELECT 1 FROM limit_permit WHERE limit_key = ?1 AND job_id = ?2 AND until = ?4)
  AND NOT EXISTS (SELECT 1 FROM limit_wait WHERE limit_key = ?1 AND job_id = ?2)
