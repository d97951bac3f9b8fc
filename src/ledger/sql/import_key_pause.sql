-- Moving a D1 ledger to shards: a paused ordering key into its shard, replacing a copy made before.
-- params: ?1 ordering_key, ?2 paused_at
INSERT OR REPLACE INTO key_pause (ordering_key, paused_at) VALUES (?1, ?2)
