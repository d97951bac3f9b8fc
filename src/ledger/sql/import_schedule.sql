-- Moving a D1 ledger to shards: a schedule's row into the first shard, replacing a copy made before.
-- params: ?1 name, ?2 last_period, ?3 last_job_id, ?4 last_enqueued_at, ?5 paused_at
INSERT OR REPLACE INTO schedule (name, last_period, last_job_id, last_enqueued_at, paused_at)
VALUES (?1, ?2, ?3, ?4, ?5)
