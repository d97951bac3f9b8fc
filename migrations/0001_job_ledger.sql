-- The job ledger: one row per job, every transition a guarded statement (src/ledger/sql/).
-- Times are milliseconds since the Unix epoch, always bound as parameters (never SQL's clock).
-- Append-only: later features (per-key sequence numbers, parked jobs) add columns in new files.
CREATE TABLE job (
  id           TEXT    PRIMARY KEY NOT NULL,
  type         TEXT,                    -- payload.type; NULL when the payload has none
  status       TEXT    NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'DONE', 'DEAD')),
  ordering_key TEXT,
  dedupe_key   TEXT,
  payload      TEXT,                    -- JSON text; NULL only for a body that was not JSON
  attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
  deferrals    INTEGER NOT NULL DEFAULT 0 CHECK (deferrals >= 0),
  lease_owner  TEXT,
  lease_until  INTEGER,
  next_run_at  INTEGER NOT NULL,
  last_error   TEXT,
  created_at   INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL,
  finished_at  INTEGER,
  -- A lease exists exactly while the job runs.
  CHECK ((status = 'RUNNING') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL))
);

-- At most one active job per dedupe key; a finished one does not block a new job.
CREATE UNIQUE INDEX job_dedupe_active ON job (dedupe_key)
  WHERE dedupe_key IS NOT NULL AND status IN ('PENDING', 'RUNNING');
-- Lists by status, newest first, with a (created_at, id) cursor.
CREATE INDEX job_status_created ON job (status, created_at DESC, id DESC);
-- The reaper's scan of expired leases.
CREATE INDEX job_running_lease ON job (lease_until) WHERE status = 'RUNNING';
-- Maintenance's scan for overdue PENDING jobs.
CREATE INDEX job_pending_due ON job (next_run_at) WHERE status = 'PENDING';
-- Purge of old DONE rows.
CREATE INDEX job_done_finished ON job (finished_at) WHERE status = 'DONE';
-- A key's jobs in order (operators now; strict per-key chains next).
CREATE INDEX job_ordering_key ON job (ordering_key, created_at) WHERE ordering_key IS NOT NULL;
