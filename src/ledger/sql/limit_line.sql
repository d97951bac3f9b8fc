-- Flow control (design §20.12): a job submitted through the API under a limit key with a
-- concurrency, recorded parked (enqueue.sql), joins the key's line at once instead of the queue;
-- the same batch then hands the line's oldest jobs the slots free now (limit_hand.sql) and sends
-- those (limit_wake.sql). So a burst of a busy key waits in the ledger, not ahead of other keys'
-- messages in the queue. A job already in the line keeps its place.
-- params: ?1 limit_key, ?2 job_id, ?3 now, ?4 route
INSERT INTO limit_wait (limit_key, job_id, since, route) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (limit_key, job_id) DO NOTHING
