-- Two changes to job_event (a table is rebuilt in place: SQLite cannot alter a CHECK):
--  - a run may end in a snooze (the handler asked to run again later, no attempt spent);
--  - the charts' backlog counts a redriven job as open again from its redrive (its created_at may
--    be long before the hour shown): recent runs and redrives are read through one index.
CREATE TABLE job_event_new (
  job_id      TEXT    NOT NULL,
  slot        INTEGER NOT NULL CHECK (slot >= 0 AND slot < 20),
  n           INTEGER NOT NULL CHECK (n >= 1),
  at          INTEGER NOT NULL,
  kind        TEXT    NOT NULL CHECK (kind IN ('attempt', 'cancel', 'redrive', 'skip')),
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
