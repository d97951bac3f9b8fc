-- A cancelled job leaves its limit key's line (design §22.1); the same batch gives back a slot
-- handed to it and hands it on (limit_give_back.sql, limit_hand.sql, limit_wake.sql), so the line
-- never waits for a job that will not come.
-- params: ?1 limit_key, ?2 job_id
DELETE FROM limit_wait WHERE limit_key = ?1 AND job_id = ?2
