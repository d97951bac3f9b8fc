-- Moving a D1 ledger to shards, its last page: every schedule's row, to go to the first shard,
-- which holds them all.
-- params: none
SELECT * FROM schedule
