-- The jobs purge.sql is about to delete (same parameters, same jobs) taken off job_tally, one
-- row per type: a purge writes a tally row per type it touches, not one per job.
-- params: ?1 since, ?2 before, ?3 status, ?4 limit, ?5 keep_keyed
WITH due AS (
  SELECT coalesce(type, '') AS type FROM job WHERE id IN (
  SELECT id FROM job
  WHERE finished_at >= ?1 AND finished_at < ?2 AND status = ?3
    AND (?3 = 'DONE' OR ((seq IS NULL OR passed_at IS NOT NULL OR ?5 = 0)
         AND NOT EXISTS (SELECT 1 FROM job_waiter WHERE job_waiter.on_id = job.id)))
  ORDER BY finished_at LIMIT ?4))
UPDATE job_tally SET n = n - (SELECT count(*) FROM due WHERE due.type = job_tally.type)
WHERE status = ?3 AND type IN (SELECT type FROM due)
