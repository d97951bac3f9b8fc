-- Flow control (design §20): a job refused a permit for want of a slot (the key is paused, full,
-- or its breaker's probe runs) waits in the key's line, oldest first, to be woken by the next
-- slot that frees (limit_release.sql) or by a resume; keeping its place if it waited before. A
-- job granted its permit leaves the line. Refusals for a time (the throttle, an open breaker)
-- wait for that time instead and are not in the line. A slot handed to this job (limit_hand.sql)
-- is its own, not a full key: woken while the breaker is open (the failure that tripped it freed
-- the slot), it waits for the cool-down and probes, instead of parking behind its own slot with
-- nothing left to wake it before maintenance (issue 38), as limit_acquire.sql does not count it.
-- A finished job never parks: an ask that applies late (its invocation stalled with it) for a
-- job since finished by another run must not put it back in the line, where the next freed slot
-- would be handed to it and stand empty until the hand-off lapsed (the simulation found one).
-- params: ?1 limit_key, ?2 job_id, ?3 now, ?4 until, ?5 route, ?6 concurrency
INSERT INTO limit_wait (limit_key, job_id, since, route)
SELECT ?1, ?2, ?3, ?5
FROM (SELECT paused, open_until, probe,
             CASE WHEN overridden = 1 THEN concurrency ELSE ?6 END AS cc
      FROM limit_state WHERE limit_key = ?1) AS s
WHERE NOT EXISTS (SELECT 1 FROM limit_permit WHERE limit_key = ?1 AND job_id = ?2 AND until = ?4)
  AND NOT EXISTS (SELECT 1 FROM job WHERE id = ?2 AND finished_at IS NOT NULL)
  AND (s.paused = 1
       OR (s.open_until IS NOT NULL AND s.open_until <= ?3)
       OR (s.cc IS NOT NULL
           AND (SELECT count(*) FROM limit_permit AS lp
                WHERE lp.limit_key = ?1 AND lp.until > ?3 AND NOT (lp.job_id = ?2 AND lp.handed = 1)) >= s.cc))
ON CONFLICT (limit_key, job_id) DO NOTHING
