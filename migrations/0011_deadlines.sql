-- A job's deadline and run timeout (design §20). deadline_at: no attempt of the job starts at or
-- after it (ms); one due later is recorded DEAD, "expired", without running. timeout_seconds: a
-- run of the job that takes longer is stopped and fails, retryable; it may only shorten the run
-- bound the lease is sized for (WEBHOOK_TIMEOUT_SECONDS). NULL: none.
ALTER TABLE job ADD COLUMN deadline_at INTEGER;
ALTER TABLE job ADD COLUMN timeout_seconds INTEGER;
