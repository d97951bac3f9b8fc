-- Moving a D1 ledger to shards, its last page: every limit key's line, to go to the limit key's
-- shard.
-- params: none
SELECT * FROM limit_wait
