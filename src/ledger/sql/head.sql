-- A key's head: its lowest-seq job that is not finished for ordering purposes (not DONE, and not a
-- DEAD job the key may pass: ON_DEAD 'skip', or skipped by an operator). ?1 ordering_key, ?2 on_dead
SELECT * FROM job
WHERE ordering_key = ?1 AND seq IS NOT NULL AND status <> 'DONE'
  AND NOT (status = 'DEAD' AND (?2 = 'skip' OR skipped_at IS NOT NULL))
ORDER BY seq
LIMIT 1
