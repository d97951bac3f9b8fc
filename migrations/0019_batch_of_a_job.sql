-- A batch's member names its batch (design §25): the callback's id, written when it is recorded,
-- so the member's view shows the batch it is part of for as long as it lives (its job_waiter row,
-- which said so while it was unfinished, is deleted once it releases the callback). A column
-- only: no row is written more for it.
ALTER TABLE job ADD COLUMN batch_id TEXT;
-- A batch's members are now purged with its callback (purge_batches.sql); those of callbacks
-- purged before are deleted here, once.
DELETE FROM batch_member WHERE batch_id NOT IN (SELECT id FROM job);
