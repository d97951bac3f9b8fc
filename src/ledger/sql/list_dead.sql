-- A page of DEAD jobs, newest first, after a (created_at, id) cursor: served by job_dead.
-- ?1 cursor created_at or NULL, ?2 cursor id, ?3 limit
SELECT * FROM job
WHERE status = 'DEAD'
  AND (?1 IS NULL OR created_at < ?1 OR (created_at = ?1 AND id < ?2))
ORDER BY created_at DESC, id DESC
LIMIT ?3
