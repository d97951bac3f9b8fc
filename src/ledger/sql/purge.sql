-- Deletes DONE jobs finished before ?1, at most ?2 at a time.
DELETE FROM job
WHERE id IN (SELECT id FROM job WHERE status = 'DONE' AND finished_at < ?1 LIMIT ?2)
RETURNING id
