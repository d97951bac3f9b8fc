-- Moving a D1 ledger to shards, its last page: every slot a running job holds, to go to its limit
-- key's shard.
-- params: none
SELECT * FROM limit_permit
