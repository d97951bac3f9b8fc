-- Moving a D1 ledger to shards: the waiters of a page's jobs (dependencies with ids after ?1, up
-- to ?2), to go to each dependency's shard.
-- params: ?1 after, ?2 last
SELECT * FROM job_waiter WHERE on_id > ?1 AND on_id <= ?2
