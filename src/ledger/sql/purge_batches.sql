-- The members' rows of the batches whose callbacks purge.sql is about to delete (same parameters,
-- same jobs): a batch is kept as long as its callback (design §25).
-- params: ?1 since, ?2 before, ?3 status, ?4 limit, ?5 keep_keyed
DELETE FROM batch_member
WHERE batch_id IN (
  SELECT id FROM job
  WHERE finished_at >= ?1 AND finished_at < ?2 AND status = ?3
    AND (?3 = 'DONE' OR ((seq IS NULL OR passed_at IS NOT NULL OR ?5 = 0)
         AND NOT EXISTS (SELECT 1 FROM job_waiter WHERE job_waiter.on_id = job.id)))
  ORDER BY finished_at LIMIT ?4)
