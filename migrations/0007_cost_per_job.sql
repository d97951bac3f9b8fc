-- Cost per job (design §15): the job table rebuilt in place so that a job's life writes as few rows
-- as D1 bills. D1 counts a row written for every table row an INSERT, UPDATE or DELETE touches
-- and for every index entry it inserts; an UPDATE re-inserts an index's entry whenever it sets a
-- column the index holds or its WHERE reads (measured under miniflare, whose D1 counts as D1
-- bills). So:
--  - the table is WITHOUT ROWID, keyed by id: no separate primary-key index to write;
--  - no index holds or filters on `status` except the DEAD-only one (a row enters it when it dies):
--    a claim (PENDING -> RUNNING) rewrites no index entry, and a completion only adds the
--    job_finished entry; open jobs are found by `finished_at IS NULL` (a CHECK keeps that exactly
--    PENDING and RUNNING), a key's jobs still in its way by `passed_at IS NULL`;
--  - a sequenced (strict-mode) job is in its key's indexes only, an unsequenced one in job_open.
-- Jobs in flight keep running across this migration: every column keeps its meaning, and the new
-- ones are filled in from the old (a DONE, cancelled or skipped job has been passed by its key).
CREATE TABLE job_new (
  id           TEXT    PRIMARY KEY NOT NULL,
  type         TEXT,
  status       TEXT    NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'DONE', 'DEAD')),
  ordering_key TEXT,
  dedupe_key   TEXT,
  payload      TEXT,
  attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
  deferrals    INTEGER NOT NULL DEFAULT 0 CHECK (deferrals >= 0),
  lease_owner  TEXT,
  lease_until  INTEGER,
  next_run_at  INTEGER NOT NULL,
  last_error   TEXT,
  created_at   INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL,
  finished_at  INTEGER,                 -- ms, when it became DONE or DEAD; NULL exactly while open
  seq          INTEGER,                 -- strict mode: place in its key's order
  skipped_at   INTEGER,                 -- ms, an operator let its key move past this DEAD job
  priority     INTEGER NOT NULL DEFAULT 5 CHECK (priority BETWEEN 0 AND 9),
  result       TEXT,
  passed_at    INTEGER,                 -- ms, when its key moved past it: DONE, cancelled or skipped
  started_at   INTEGER,                 -- ms, when its last run started
  ran_by       TEXT,                    -- DONE: the invocation whose run finished it
  http_status  INTEGER,                 -- DONE: the HTTP status that run got, if any
  CHECK ((status = 'RUNNING') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
  CHECK ((finished_at IS NULL) = (status IN ('PENDING', 'RUNNING')))
) WITHOUT ROWID;

INSERT INTO job_new (id, type, status, ordering_key, dedupe_key, payload, attempts, max_attempts,
                     deferrals, lease_owner, lease_until, next_run_at, last_error, created_at,
                     updated_at, finished_at, seq, skipped_at, priority, result, passed_at)
SELECT id, type, status, ordering_key, dedupe_key, payload, attempts, max_attempts, deferrals,
       lease_owner, lease_until, next_run_at, last_error, created_at, updated_at,
       CASE WHEN status IN ('PENDING', 'RUNNING') THEN NULL ELSE coalesce(finished_at, updated_at) END,
       seq, skipped_at, priority, result,
       CASE WHEN status = 'DONE' THEN coalesce(finished_at, updated_at)
            WHEN status = 'DEAD' THEN skipped_at END
FROM job;
DROP TABLE job;
ALTER TABLE job_new RENAME TO job;

-- The run rule now reads only the front of a key's way (src/ledger/sql/claim_next.sql), which
-- holds while no job in the way sits below a RUNNING one. A redrive under the old layout could
-- leave one there (a job the key had moved past, redriven while a later job ran): it moves to its
-- key's end, as a redrive does now (src/ledger/sql/redrive.sql).
UPDATE job SET seq = moved.top + moved.rank
FROM (SELECT j.id,
             (SELECT max(k.seq) FROM job AS k WHERE k.ordering_key = j.ordering_key AND k.seq IS NOT NULL) AS top,
             row_number() OVER (PARTITION BY j.ordering_key ORDER BY j.seq) AS rank
      FROM job AS j
      WHERE j.seq IS NOT NULL AND j.passed_at IS NULL AND j.status <> 'RUNNING'
        AND EXISTS (SELECT 1 FROM job AS r
                    WHERE r.ordering_key = j.ordering_key AND r.seq > j.seq AND r.status = 'RUNNING')) AS moved
WHERE job.id = moved.id;

-- Every list newest first, with a (created_at, id) cursor; the DONE list walks it and filters.
CREATE INDEX job_created ON job (created_at DESC, id DESC);
-- Open unsequenced jobs by due time: maintenance's overdue and expired-lease scans, lists of
-- PENDING and RUNNING jobs. A claim sets neither column, so it rewrites no entry here.
CREATE INDEX job_open ON job (next_run_at) WHERE finished_at IS NULL AND seq IS NULL;
-- Finished jobs by time, with their status: the purge and the charts read only the index. (A
-- status change of an open job rewrites no entry here: the job is in it only once finished.)
CREATE INDEX job_finished ON job (finished_at, status) WHERE finished_at IS NOT NULL;
-- Strict mode: one job per (key, seq), and a key's last seq.
CREATE UNIQUE INDEX job_key_seq ON job (ordering_key, seq) WHERE seq IS NOT NULL;
-- Strict mode: a key's jobs still in its way (the run rule reads only these), in order.
CREATE INDEX job_key_open ON job (ordering_key, seq) WHERE seq IS NOT NULL AND passed_at IS NULL;
-- Lock mode: a key's open jobs, oldest first (the job to wake after a cancelled holder).
CREATE INDEX job_lock_key ON job (ordering_key, created_at)
  WHERE ordering_key IS NOT NULL AND seq IS NULL AND finished_at IS NULL;
-- DEAD jobs newest first (the dead-letter list); a job enters it only when it dies.
CREATE INDEX job_dead ON job (created_at DESC, id DESC) WHERE status = 'DEAD';
-- At most one open job per dedupe key; a finished one does not block a new job.
CREATE UNIQUE INDEX job_dedupe_active ON job (dedupe_key) WHERE dedupe_key IS NOT NULL AND finished_at IS NULL;
