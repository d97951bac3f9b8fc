-- DEAD -> PENDING for another round: attempts reset, the old error kept in last_error, an
-- operator's skip (or cancel) undone. In strict mode a job still in its key's way (a blocked head) keeps its
-- seq and runs before the jobs behind it again; a job its key has already moved past (a job
-- above it passed or runs) takes the key's next seq: it runs after every job its key has now,
-- never below a running one (claim_next.sql reads only the front of a key's way). A deadline
-- already past is cleared (design §20.6): an operator's redrive means "run it", and a job still
-- bound by that deadline would only expire again at its next claim; one still ahead is kept.
-- Refused (no row) when the job has no readable payload (an unreadable body: it could never be
-- sent again) or its dedupe key is active in another job. ?1 id, ?2 now
-- params: ?1 id, ?2 now
UPDATE job
SET status = 'PENDING', attempts = 0, lease_owner = NULL, lease_until = NULL, next_run_at = ?2,
    finished_at = NULL, skipped_at = NULL, passed_at = NULL, updated_at = ?2, cancel_requested_at = NULL,
    deadline_at = CASE WHEN deadline_at <= ?2 THEN NULL ELSE deadline_at END,
    last_error = 'redriven; before: ' || coalesce(last_error, '(none)'),
    seq = CASE
      WHEN seq IS NOT NULL AND EXISTS (
        SELECT 1 FROM job AS above
        WHERE above.ordering_key = job.ordering_key AND above.seq > job.seq
          AND (above.passed_at IS NOT NULL OR above.status = 'RUNNING'))
      THEN (SELECT max(k.seq) + 1 FROM job AS k WHERE k.ordering_key = job.ordering_key AND k.seq IS NOT NULL)
      ELSE seq END
WHERE id = ?1 AND status = 'DEAD' AND payload IS NOT NULL
  AND (dedupe_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM job AS other
    WHERE other.dedupe_key = job.dedupe_key AND other.finished_at IS NULL AND other.superseded_at IS NULL
      AND other.id <> job.id))
RETURNING *
