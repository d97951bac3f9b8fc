-- THE SUPERSEDE RULE, its first half (design §22.3): a submission with "on_duplicate": "replace"
-- whose dedupe key a PENDING job holds gives that job its payload and options (attempts allowed,
-- priority, deadline, run time limit); the job keeps its id, its place in its key's order, its
-- limit key and its line. Only a PENDING job is touched, in one statement: a run that starts
-- after this answer reads the new payload, one already started is never changed underneath (the
-- submission is then recorded beside it, supersede_running.sql). A debounced submission (?8, its
-- new start) also puts the job's start off, never past its cap (debounce_until, §22.4). A job
-- replaced once is replaceable from then on: no strict chain claims it ahead (claim_next.sql).
-- params: ?1 dedupe_key, ?2 id, ?3 now, ?4 payload, ?5 max_attempts, ?6 priority, ?7 deadline_at, ?8 due_at, ?9 timeout_seconds
UPDATE job
SET payload = ?4, max_attempts = ?5, priority = ?6, deadline_at = ?7, timeout_seconds = ?9, updated_at = ?3,
    replaceable = 1,
    next_run_at = CASE WHEN ?8 IS NULL THEN next_run_at
                       ELSE max(CASE WHEN parked = 1 THEN ?3 ELSE next_run_at END,
                                min(?8, coalesce(debounce_until, ?8))) END,
    parked = CASE WHEN ?8 IS NULL THEN parked ELSE 0 END
WHERE dedupe_key = ?1 AND status = 'PENDING' AND finished_at IS NULL AND superseded_at IS NULL AND id <> ?2
RETURNING *
