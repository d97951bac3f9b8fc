-- Flow control per limit key (design §20). A job may name a limit key (a tenant, a remote host)
-- besides its ordering key; the key's policy (configured by `LIMITS`, or set at run time through
-- the API) bounds how fast and how many of its jobs start. A limit key's state lives in one shard,
-- the one its name routes to, and is decided there atomically:
--  - limit_state: one row per limit key seen: paused, the throttle's theoretical arrival time
--    (GCRA), the circuit breaker, and a run-time override of the configured policy;
--  - limit_permit: one row per job running under a concurrency limit, until its lease ends (a
--    renewal extends both), deleted when its result is recorded;
--  - limit_wait: jobs refused for want of a free slot, woken (sent again) one per freed slot,
--    oldest first, instead of polling.
-- A job's own row only gains its limit key: a job without one writes nothing more than before.
ALTER TABLE job ADD COLUMN limit_key TEXT;

CREATE TABLE limit_state (
  limit_key    TEXT    PRIMARY KEY NOT NULL,
  paused       INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
  tat_us       INTEGER NOT NULL DEFAULT 0,   -- µs: the throttle's theoretical arrival time (GCRA)
  overridden   INTEGER NOT NULL DEFAULT 0 CHECK (overridden IN (0, 1)),
  interval_us  INTEGER,                      -- override: µs between starts (NULL: no throttle)
  tolerance_us INTEGER,                      -- override: how far ahead a burst may run, µs
  concurrency  INTEGER,                      -- override: most running at once (NULL: no limit)
  trip_after   INTEGER,                      -- override: consecutive failures that open the breaker
  cooldown_ms  INTEGER,                      -- override: the breaker's first cool-down
  failures     INTEGER NOT NULL DEFAULT 0,   -- breaker: consecutive failures
  opens        INTEGER NOT NULL DEFAULT 0,   -- breaker: times opened since it last closed
  open_until   INTEGER,                      -- breaker: ms; NULL while closed
  probe        TEXT,                         -- breaker: the job let through once the cool-down ends
  updated_at   INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE limit_permit (
  limit_key TEXT    NOT NULL,
  job_id    TEXT    NOT NULL,
  until     INTEGER NOT NULL,                -- ms: the job's lease end; past it the slot is free
  PRIMARY KEY (limit_key, job_id)
) WITHOUT ROWID;

CREATE TABLE limit_wait (
  limit_key TEXT    NOT NULL,
  job_id    TEXT    NOT NULL,
  since     INTEGER NOT NULL,                -- ms: first refused
  route     TEXT    NOT NULL,                -- the job's route (where its row lives), in decimal
  PRIMARY KEY (limit_key, job_id)
) WITHOUT ROWID;
