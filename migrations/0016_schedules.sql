-- Periodic jobs (design §23): a row per schedule of SCHEDULES, in the ledger's first shard, once the
-- cron has seen it or an operator paused it. last_period is the start of the latest period seen
-- (its job submitted, or passed over while paused, or before the schedule's first run): a cron run
-- submits a period's job only when it is later, so a period is never enqueued again after its job
-- is purged. The job's id (schedule:<name>:<period>) keeps two runs that see one period at once
-- from enqueueing it twice.
CREATE TABLE schedule (
  name TEXT PRIMARY KEY NOT NULL,
  last_period INTEGER,
  last_job_id TEXT,
  last_enqueued_at INTEGER,
  paused_at INTEGER
) WITHOUT ROWID;
