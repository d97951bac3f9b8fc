-- The history of the jobs purge.sql is about to delete (same ?1 before, ?2 limit, same order).
-- params: ?1 before, ?2 limit
DELETE FROM job_event
WHERE job_id IN (SELECT id FROM job WHERE finished_at < ?1 AND status = 'DONE' ORDER BY finished_at LIMIT ?2)
