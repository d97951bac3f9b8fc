-- Moving a D1 ledger to shards, its last page: every limit key's state (pause, override,
-- throttle, breaker), to go to the limit key's shard.
-- params: none
SELECT * FROM limit_state
