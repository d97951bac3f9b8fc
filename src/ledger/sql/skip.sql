-- An operator lets a blocked key move past its DEAD head (ON_DEAD = 'block'): only the key's
-- current head, only while it is DEAD and not yet skipped. ?1 ordering_key, ?2 now
-- params: ?1 ordering_key, ?2 now
UPDATE job SET skipped_at = ?2, passed_at = ?2, updated_at = ?2
WHERE id = (SELECT id FROM job
            WHERE ordering_key = ?1 AND seq IS NOT NULL AND passed_at IS NULL
            ORDER BY seq LIMIT 1)
  AND status = 'DEAD' AND skipped_at IS NULL
RETURNING *
