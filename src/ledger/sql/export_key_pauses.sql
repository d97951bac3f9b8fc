-- Moving a D1 ledger to shards, its last page: every paused ordering key, to go to the key's shard.
-- params: none
SELECT * FROM key_pause
