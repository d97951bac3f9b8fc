-- Moving a D1 ledger to shards: a wait into its dependent's shard, replacing a copy made before.
-- params: ?1 job_id, ?2 on_id, ?3 on_route, ?4 on_dead, ?5 registered, ?6 created_at
INSERT OR REPLACE INTO job_wait (job_id, on_id, on_route, on_dead, registered, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
