-- Dependencies (design §24): a job submitted with "after" does not start until each job it names
-- has finished. Two halves of one edge, each in the shard that needs it (a Durable Object shard
-- cannot write another inside its transaction):
-- job_wait, in the dependent's shard: one row per dependency it still waits on. A job with a row
-- here is never claimed (claim.sql, claim_next.sql) nor re-sent (overdue.sql, stalled_heads.sql).
-- registered: the dependency's shard has its job_waiter row (or the dependency had finished); a
-- row left unregistered by a submission that died between its steps is maintenance's to finish.
CREATE TABLE job_wait (
  job_id     TEXT    NOT NULL,
  on_id      TEXT    NOT NULL,
  on_route   TEXT    NOT NULL,
  on_dead    TEXT    NOT NULL CHECK (on_dead IN ('dead', 'run')),
  registered INTEGER NOT NULL DEFAULT 0 CHECK (registered IN (0, 1)),
  created_at INTEGER NOT NULL,
  PRIMARY KEY (job_id, on_id)
) WITHOUT ROWID;
CREATE INDEX job_wait_unregistered ON job_wait (created_at) WHERE registered = 0;
-- job_waiter, in the dependency's shard: whom to wake when it finishes. Written only while the
-- dependency is unfinished (wait_register.sql), read by the transition that finishes it
-- (complete.sql, fail.sql say whether it has any), deleted once the dependent is released.
CREATE TABLE job_waiter (
  on_id     TEXT NOT NULL,
  job_id    TEXT NOT NULL,
  job_route TEXT NOT NULL,
  PRIMARY KEY (on_id, job_id)
) WITHOUT ROWID;
-- Batches (design §25): a batch is its members and a callback job that runs after all of them
-- (job_wait, "after_dead": "run"); the batch's id is the callback's. In the callback's shard, a
-- row per member in its request's order; each member's status and result are written when its
-- finish releases the callback (batch_done.sql), and given to the callback with its payload once
-- the last has (batch_ready.sql).
CREATE TABLE batch_member (
  batch_id    TEXT    NOT NULL,
  member_id   TEXT    NOT NULL,
  place       INTEGER NOT NULL,
  status      TEXT    CHECK (status IN ('DONE', 'DEAD')),
  result      TEXT,
  finished_at INTEGER,
  PRIMARY KEY (batch_id, member_id)
) WITHOUT ROWID;
