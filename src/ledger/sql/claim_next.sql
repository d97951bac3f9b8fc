-- THE STRICT-MODE RUN RULE (design §3b.2), in one statement, so it holds under any number of
-- concurrent invocations (D1 runs statements one at a time):
--   a keyed job may start only when every lower seq of its key is finished (DONE, or DEAD when
--   ON_DEAD is 'skip' or an operator skipped it) and no job of its key is RUNNING.
-- Claims the key's next due jobs in seq order, up to ?7 of them, all for one invocation (which
-- runs them in order): the PENDING jobs below the key's first blocker, where a blocker is a job in
-- the key's way that is not PENDING-and-due (a job waiting for its retry, a RUNNING job, a DEAD
-- head under 'block'). A RUNNING job of the key, live or expired, claims nothing: an expired
-- lease is the reaper's to free. ?8, when given, is the job this invocation just finished: the
-- claim only chains if that job really is finished (our record of it applied). A paused key
-- (key_pause, design §20.11) claims nothing. A replaceable job (submitted with "on_duplicate":
-- "replace", or replaced since) is claimed only as the first of a claim, never ahead in a chunk, so
-- it stays PENDING until just before its run starts: a replacement answered before then always
-- reaches it in its place (design §22.3). A job waiting on a dependency (job_wait, design §24)
-- blocks its key like a job not yet due: the key's later jobs wait behind it.
--
-- Reads only the front of the key's way: its first ?7 jobs in the way give the first blocker
-- (a RUNNING one blocks everything: -1), and nothing past them could be claimed. A RUNNING job is
-- always among them, because every job below a RUNNING one has been passed (this rule claimed it
-- so; a redrive gives a job its key has already moved past a new seq at the key's end,
-- redrive.sql; a new job takes the key's next seq).
-- params: ?1 ordering_key, ?2 lease_owner, ?3 lease_until, ?4 now, ?5 due_before, ?6 on_dead, ?7 limit, ?8 prev
UPDATE job
SET status = 'RUNNING', attempts = attempts + 1, lease_owner = ?2, lease_until = ?3, updated_at = ?4,
    started_at = ?4, parked = 0
WHERE id IN (
  SELECT id FROM job
  WHERE ordering_key = ?1 AND seq IS NOT NULL AND passed_at IS NULL AND status = 'PENDING'
    AND seq < (
      SELECT coalesce(min(CASE WHEN status = 'RUNNING' THEN -1
                               WHEN NOT (status = 'PENDING' AND next_run_at <= ?5) THEN seq
                               WHEN replaceable = 1 AND place > 1 THEN seq
                               WHEN waits THEN seq END),
                      9223372036854775807)
      FROM (SELECT seq, status, next_run_at, replaceable, row_number() OVER (ORDER BY seq) AS place,
                   EXISTS (SELECT 1 FROM job_wait WHERE job_wait.job_id = job.id) AS waits
            FROM job
            WHERE ordering_key = ?1 AND seq IS NOT NULL AND passed_at IS NULL
              AND NOT (status = 'DEAD' AND ?6 = 'skip')
            ORDER BY seq
            LIMIT ?7))
    AND NOT EXISTS (SELECT 1 FROM key_pause WHERE ordering_key = ?1)
    AND (?8 IS NULL OR EXISTS (SELECT 1 FROM job AS p WHERE p.id = ?8 AND p.status IN ('DONE', 'DEAD')))
  ORDER BY seq
  LIMIT ?7)
RETURNING *
