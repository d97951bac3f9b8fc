-- A page of one status's jobs, newest first, after a (created_at, id) cursor: served by the
-- (status, created_at, id) index. ?1 status, ?2 cursor created_at or NULL, ?3 cursor id, ?4 limit
SELECT * FROM job
WHERE status = ?1
  AND (?2 IS NULL OR created_at < ?2 OR (created_at = ?2 AND id < ?3))
ORDER BY created_at DESC, id DESC
LIMIT ?4
