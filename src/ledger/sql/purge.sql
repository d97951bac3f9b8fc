-- Deletes DONE jobs finished before ?1, at most ?2 at a time, with their history. The two
-- statements run in one batch (one transaction): history first, while its jobs still exist.
-- Read in finished_at order from job_finished alone (it holds the status).
-- params: ?1 before, ?2 limit
DELETE FROM job
WHERE id IN (SELECT id FROM job WHERE finished_at < ?1 AND status = 'DONE' ORDER BY finished_at LIMIT ?2)
RETURNING id
