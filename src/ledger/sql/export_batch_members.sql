-- Moving a D1 ledger to shards: the members of the batches whose callbacks are a page's jobs (ids
-- after ?1, up to ?2), to go to each callback's shard.
-- params: ?1 after, ?2 last
SELECT * FROM batch_member WHERE batch_id > ?1 AND batch_id <= ?2
