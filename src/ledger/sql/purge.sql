-- Deletes at most ?4 jobs of status ?3 (DONE or DEAD) finished in [?1, ?2), oldest first; the
-- statements before it in the same batch (one transaction) take their tally, history, waits and
-- batch rows with them, each choosing the same jobs. Read from job_finished from ?1 on: the DONE
-- purge starts where the last one stopped (its cursor, purge_cursor), so it never re-reads the
-- DEAD jobs it keeps. A DEAD job is kept while it blocks its key (?5 = 1: ON_DEAD = "block", and
-- no operator skipped it) or a job waits on it that nothing has released yet (design "The
-- ledger's life").
-- params: ?1 since, ?2 before, ?3 status, ?4 limit, ?5 keep_keyed
DELETE FROM job
WHERE id IN (
  SELECT id FROM job
  WHERE finished_at >= ?1 AND finished_at < ?2 AND status = ?3
    AND (?3 = 'DONE' OR ((seq IS NULL OR passed_at IS NOT NULL OR ?5 = 0)
         AND NOT EXISTS (SELECT 1 FROM job_waiter WHERE job_waiter.on_id = job.id)))
  ORDER BY finished_at LIMIT ?4)
RETURNING id, finished_at
