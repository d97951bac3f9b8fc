-- Moving a D1 ledger to shards (design §19.7): the waits of a page's jobs (dependents with ids
-- after ?1, up to ?2), to go to each dependent's shard.
-- params: ?1 after, ?2 last
SELECT * FROM job_wait WHERE job_id > ?1 AND job_id <= ?2
