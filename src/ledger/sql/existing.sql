-- The job an enqueue collided with: the same id, else the active job holding the dedupe key.
-- params: ?1 id, ?2 dedupe_key
SELECT * FROM job
WHERE id = ?1 OR (?2 IS NOT NULL AND dedupe_key = ?2 AND finished_at IS NULL AND superseded_at IS NULL)
ORDER BY id = ?1 DESC
LIMIT 1
