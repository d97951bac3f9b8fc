-- Flow control (design §20): a woken job whose delivery could not start it gives back the slot
-- handed to it (limit_hand.sql), and the same batch hands it on (limit_hand.sql, limit_wake.sql).
-- Such a job waits behind a job of its ordering key that is in the line itself: lock mode, the
-- key's lock is held for that job (deliveries out of order); strict mode, an operator's redrive
-- put the key's DEAD head back ahead of it. Kept, the slot stood empty until the hand-off lapsed
-- (30 s) while that job waited in line for it, left to maintenance (the simulation's line check
-- found it). A permit the job's own ask took (handed = 0) is its run's and stays.
-- params: ?1 limit_key, ?2 job_id
DELETE FROM limit_permit WHERE limit_key = ?1 AND job_id = ?2 AND handed = 1
