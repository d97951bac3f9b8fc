-- Moving a D1 ledger to shards: one history row into its job's shard, replacing a copy made before.
-- params: ?1 job_id, ?2 slot, ?3 n, ?4 at, ?5 kind, ?6 actor, ?7 attempt, ?8 started_at, ?9 outcome, ?10 error, ?11 http_status
INSERT OR REPLACE INTO job_event (job_id, slot, n, at, kind, actor, attempt, started_at, outcome, error, http_status)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
