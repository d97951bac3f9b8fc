-- Attempt history and operator audit (what each run did, who cancelled or redrove a job),
-- job priority (design §12) and job results.
--
-- job_event keeps the last 20 events of each job in a ring: event n of a job lives in slot
-- n % 20, and `INSERT OR REPLACE` on (job_id, slot) overwrites the oldest, so a job retried or
-- redriven without end never grows its history. The newest event has the highest n.
CREATE TABLE job_event (
  job_id      TEXT    NOT NULL,
  slot        INTEGER NOT NULL CHECK (slot >= 0 AND slot < 20),
  n           INTEGER NOT NULL CHECK (n >= 1),          -- the job's event number, from 1
  at          INTEGER NOT NULL,                          -- ms, when it happened (a run: when it ended)
  kind        TEXT    NOT NULL CHECK (kind IN ('attempt', 'cancel', 'redrive', 'skip')),
  actor       TEXT    NOT NULL,                          -- the invocation that ran it, or "api"
  attempt     INTEGER,                                   -- runs: the attempt number
  started_at  INTEGER,                                   -- runs: ms the handler started
  outcome     TEXT CHECK (outcome IN ('done', 'retry', 'dead')),   -- runs: how it ended
  error       TEXT,
  http_status INTEGER,                                   -- runs that got an HTTP answer
  PRIMARY KEY (job_id, slot)
) WITHOUT ROWID;
-- The dashboard's per-minute charts read recent runs by time.
CREATE INDEX job_event_at ON job_event (at) WHERE kind = 'attempt';

-- 0 most urgent, 9 least; existing jobs take the default.
ALTER TABLE job ADD COLUMN priority INTEGER NOT NULL DEFAULT 5 CHECK (priority BETWEEN 0 AND 9);
-- What a successful run returned (JSON text, at most 4 KB; see src/handlers/mod.rs).
ALTER TABLE job ADD COLUMN result TEXT;

-- The charts' backlog walks back from now by jobs created and finished per minute.
CREATE INDEX job_finished ON job (finished_at) WHERE finished_at IS NOT NULL;
