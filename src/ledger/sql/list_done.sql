-- A page of DONE jobs, newest first, after a (created_at, id) cursor: walks job_created and
-- passes over the few jobs that are not DONE.
-- ?1 cursor created_at or NULL, ?2 cursor id, ?3 limit
SELECT * FROM job
WHERE +status = 'DONE'
  AND (?1 IS NULL OR created_at < ?1 OR (created_at = ?1 AND id < ?2))
ORDER BY created_at DESC, id DESC
LIMIT ?3
