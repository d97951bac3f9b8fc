-- A limit key's line in order (design §20): a freed slot hands itself to the oldest parked job
-- and wakes it (limit_hand.sql, limit_wake.sql), reading the line by (since, job_id). Without
-- this index each wake-up read every job parked for the key: a hot key with thousands parked
-- read thousands of rows per freed slot.
CREATE INDEX limit_wait_line ON limit_wait (limit_key, since, job_id);
