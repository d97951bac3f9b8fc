-- Strict mode parks a job refused a slot by its limit key not due (design §20.10): `parked` says
-- its wait is a parking, so only then does its wake-up's delivery make it due (wake_parked.sql).
-- A parking sets it (defer.sql), a claim clears it: a copy of a wake-up delivered after the job
-- ran again never cuts a backoff or a snooze short. Part of the job's own row: no index, nothing
-- more written.
ALTER TABLE job ADD COLUMN parked INTEGER NOT NULL DEFAULT 0 CHECK (parked IN (0, 1));
