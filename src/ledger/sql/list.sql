-- A page of jobs, newest first, optionally of one status, after a (created_at, id) cursor.
-- ?1 status or NULL, ?2 cursor created_at or NULL, ?3 cursor id, ?4 limit
SELECT * FROM job
WHERE (?1 IS NULL OR status = ?1)
  AND (?2 IS NULL OR created_at < ?2 OR (created_at = ?2 AND id < ?3))
ORDER BY created_at DESC, id DESC
LIMIT ?4
