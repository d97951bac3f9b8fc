-- Flow control (design §20): a job back in its key's line (limit_park.sql, same batch: woken,
-- then refused for a pause or a probe) gives up the slot handed to it. A job waiting in the line
-- holds no slot: the line's next hand-off, a resume's or a probe's success, hands it one again in
-- its turn. Kept, the slot was counted by every ask and by no hand-off (nor could it be: while the
-- breaker is not closed one hand-off at most is live), and the line waited for it to lapse
-- with nothing to wake it (the simulation's line check found it).
-- params: ?1 limit_key, ?2 job_id
DELETE FROM limit_permit
WHERE limit_key = ?1 AND job_id = ?2 AND handed = 1
  AND EXISTS (SELECT 1 FROM limit_wait WHERE limit_key = ?1 AND job_id = ?2)
