-- A key's head: its lowest-seq job the key has not passed (not DONE, cancelled or skipped: see
-- passed_at), and not a DEAD job under ON_DEAD 'skip'. ?1 ordering_key, ?2 on_dead
-- params: ?1 ordering_key, ?2 on_dead
SELECT * FROM job
WHERE ordering_key = ?1 AND seq IS NOT NULL AND passed_at IS NULL
  AND NOT (status = 'DEAD' AND ?2 = 'skip')
ORDER BY seq
LIMIT 1
