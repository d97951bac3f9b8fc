-- Moving a D1 ledger to shards: a place in a limit key's line into the limit key's shard,
-- replacing a copy made before.
-- params: ?1 limit_key, ?2 job_id, ?3 since, ?4 route
INSERT OR REPLACE INTO limit_wait (limit_key, job_id, since, route) VALUES (?1, ?2, ?3, ?4)
