-- What a ledger costs after a year (design "The ledger's life"): reads that are polled cost the
-- open work or a constant, never the history, and the purge resumes where it stopped.
--
-- job_tally: finished jobs (DONE and DEAD) per status and type, kept by the triggers below in the
-- same statement (and so the same transaction) as the write that moves a job, whichever statement
-- that is: counts, GET /metrics and the dashboard read these few rows instead of counting every
-- finished job. A type-less job counts under ''. Open jobs are not tallied: they are counted
-- through the open indexes (their number is the open work), and a claim or a retry, the
-- commonest writes, write nothing more. The purge takes what it deletes off in one statement
-- (purge_tally.sql), not row by row: a trigger on DELETE would write one row more per job purged.
CREATE TABLE job_tally (
  status TEXT    NOT NULL CHECK (status IN ('DONE', 'DEAD')),
  type   TEXT    NOT NULL,
  n      INTEGER NOT NULL,
  PRIMARY KEY (status, type)
) WITHOUT ROWID;
INSERT INTO job_tally (status, type, n)
SELECT status, coalesce(type, ''), count(*) FROM job WHERE finished_at IS NOT NULL GROUP BY status, coalesce(type, '');
-- A job inserted finished (recorded DEAD on arrival, or moved from another ledger).
CREATE TRIGGER job_tally_insert AFTER INSERT ON job
WHEN new.status IN ('DONE', 'DEAD')
BEGIN
  INSERT INTO job_tally (status, type, n) VALUES (new.status, coalesce(new.type, ''), 1)
  ON CONFLICT (status, type) DO UPDATE SET n = n + 1;
END;
-- A job that finishes, is redriven (DEAD -> PENDING), or moves between finished statuses.
CREATE TRIGGER job_tally_move AFTER UPDATE OF status ON job
WHEN old.status IS NOT new.status AND (old.status IN ('DONE', 'DEAD') OR new.status IN ('DONE', 'DEAD'))
BEGIN
  UPDATE job_tally SET n = n - 1
  WHERE old.status IN ('DONE', 'DEAD') AND status = old.status AND type = coalesce(old.type, '');
  INSERT INTO job_tally (status, type, n) SELECT new.status, coalesce(new.type, ''), 1
  WHERE new.status IN ('DONE', 'DEAD')
  ON CONFLICT (status, type) DO UPDATE SET n = n + 1;
END;
-- The purge's cursor: the finished_at before which no DONE job is left, so that each run starts
-- where the last one stopped instead of re-reading, from job_finished's oldest end, every DEAD job
-- it keeps (design "The ledger's life").
CREATE TABLE purge_cursor (
  name  TEXT    PRIMARY KEY NOT NULL,
  until INTEGER NOT NULL
) WITHOUT ROWID;
-- A key's DEAD head that blocks it (ON_DEAD = "block", not skipped): found without walking every
-- DEAD job (blocked_keys.sql). Few rows: an operator redrives or skips them.
CREATE INDEX job_dead_head ON job (ordering_key, seq) WHERE status = 'DEAD' AND seq IS NOT NULL AND passed_at IS NULL;
