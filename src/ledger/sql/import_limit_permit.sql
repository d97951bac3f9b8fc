-- Moving a D1 ledger to shards: a running job's slot into its limit key's shard, replacing a copy
-- made before.
-- params: ?1 limit_key, ?2 job_id, ?3 until, ?4 handed
INSERT OR REPLACE INTO limit_permit (limit_key, job_id, until, handed) VALUES (?1, ?2, ?3, coalesce(?4, 0))
