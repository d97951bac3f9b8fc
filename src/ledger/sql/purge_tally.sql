-- The jobs purge.sql is about to delete (same parameters, same jobs) taken off job_tally, one
-- row per type: a purge writes a tally row per type it touches, not one per job, and reads the
-- jobs once (grouped by type in one pass, joined to the tally).
-- params: ?1 since, ?2 before, ?3 status, ?4 limit, ?5 keep_keyed
UPDATE job_tally SET n = job_tally.n - due.gone
FROM (
  SELECT coalesce(type, '') AS type, count(*) AS gone FROM job WHERE id IN (
  SELECT id FROM job
  WHERE finished_at >= ?1 AND finished_at < ?2 AND status = ?3
    AND (?3 = 'DONE' OR ((seq IS NULL OR passed_at IS NOT NULL OR ?5 = 0)
         AND NOT EXISTS (SELECT 1 FROM job_waiter WHERE job_waiter.on_id = job.id)))
  ORDER BY finished_at LIMIT ?4)
  GROUP BY 1) AS due
WHERE job_tally.status = ?3 AND job_tally.type = due.type
