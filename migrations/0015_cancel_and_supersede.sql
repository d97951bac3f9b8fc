-- Cancelling running jobs, and superseding and debouncing submissions (design §22):
--  - cancel_requested_at: when an operator asked a RUNNING job to stop. The run learns of it from
--    the ledger (its watch, §22.1) and whatever it returns, the job ends DEAD "cancelled"; a job
--    with a cancel requested is never claimed again, and an expired lease ends it DEAD too.
--  - debounce_until: a debounced job's latest start (its first submission plus its cap): each newer
--    submission replaces its payload and puts its start off, never past this (§22.4).
--  - superseded_at: when a newer submission with the job's dedupe key took the key over while the
--    job ran (on_duplicate "replace" or "cancel", §22.3): the key's uniqueness is over the open jobs
--    not superseded, so the newer one is recorded beside the running one, which keeps its route.
--  - replaceable: 1 for a job submitted with "on_duplicate": "replace" (or a debounce), or replaced
--    since: a strict chain never claims it ahead of its start, so a replacement answered before its
--    run starts always reaches it in its place (§22.3). Other jobs are claimed ahead in chunks.
--  - job_event gains two kinds (a table is rebuilt in place: SQLite cannot alter a CHECK):
--    'cancel_requested' and 'superseded' (a newer submission replaced the payload, or took over the
--    dedupe key of a running job).
ALTER TABLE job ADD COLUMN cancel_requested_at INTEGER;
ALTER TABLE job ADD COLUMN debounce_until INTEGER;
ALTER TABLE job ADD COLUMN superseded_at INTEGER;
ALTER TABLE job ADD COLUMN replaceable INTEGER NOT NULL DEFAULT 0;
DROP INDEX job_dedupe_active;
CREATE UNIQUE INDEX job_dedupe_active ON job (dedupe_key)
  WHERE dedupe_key IS NOT NULL AND finished_at IS NULL AND superseded_at IS NULL;
CREATE TABLE job_event_new (
  job_id      TEXT    NOT NULL,
  slot        INTEGER NOT NULL CHECK (slot >= 0 AND slot < 20),
  n           INTEGER NOT NULL CHECK (n >= 1),
  at          INTEGER NOT NULL,
  kind        TEXT    NOT NULL CHECK (kind IN ('attempt', 'cancel', 'redrive', 'skip', 'cancel_requested', 'superseded')),
  actor       TEXT    NOT NULL,
  attempt     INTEGER,
  started_at  INTEGER,
  outcome     TEXT CHECK (outcome IN ('done', 'retry', 'dead', 'snooze')),
  error       TEXT,
  http_status INTEGER,
  PRIMARY KEY (job_id, slot)
) WITHOUT ROWID;
INSERT INTO job_event_new SELECT job_id, slot, n, at, kind, actor, attempt, started_at, outcome, error, http_status FROM job_event;
DROP TABLE job_event;
ALTER TABLE job_event_new RENAME TO job_event;
CREATE INDEX job_event_at ON job_event (at) WHERE kind IN ('attempt', 'redrive');
