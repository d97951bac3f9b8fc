-- Deletes DONE jobs finished before ?1, at most ?2 at a time, with their history. The two
-- statements run in one batch (one transaction): history first, while its jobs still exist.
DELETE FROM job
WHERE id IN (SELECT id FROM job WHERE status = 'DONE' AND finished_at < ?1 ORDER BY finished_at, id LIMIT ?2)
RETURNING id
