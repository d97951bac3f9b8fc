-- Moving a D1 ledger to shards: a waiter into its dependency's shard, replacing a copy made before.
-- params: ?1 on_id, ?2 job_id, ?3 job_route
INSERT OR REPLACE INTO job_waiter (on_id, job_id, job_route) VALUES (?1, ?2, ?3)
