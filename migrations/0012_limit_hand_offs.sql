-- Flow control's hand-offs (design §20.3). A freed slot is handed to the oldest job parked for it
-- (limit_hand.sql): a permit in that job's name, marked handed, which the job's own ask takes
-- over (and does not count against itself); a permit a run took is never taken over by another
-- run of the same job while it is live (a run that stalled past its lease may still be running).
-- The index reads a limit key's line in order: without it each wake-up read every job parked for
-- the key, thousands of rows per freed slot on a hot key.
ALTER TABLE limit_permit ADD COLUMN handed INTEGER NOT NULL DEFAULT 0 CHECK (handed IN (0, 1));
CREATE INDEX limit_wait_line ON limit_wait (limit_key, since, job_id);
