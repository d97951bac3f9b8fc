-- Keys blocked by a DEAD head (ON_DEAD = 'block'): the DEAD job no operator has skipped with no
-- job in its key's way before it, and how many jobs wait behind it. Found through job_dead_head,
-- which holds only DEAD jobs their keys have not moved past: never every DEAD job. ?1 limit
-- params: ?1 limit
SELECT h.*, (SELECT count(*) FROM job AS w
             WHERE w.ordering_key = h.ordering_key AND w.seq IS NOT NULL AND w.passed_at IS NULL
               AND w.seq > h.seq AND w.status = 'PENDING') AS waiting
FROM job AS h INDEXED BY job_dead_head
WHERE h.status = 'DEAD' AND h.seq IS NOT NULL AND h.passed_at IS NULL
  AND NOT EXISTS (
    SELECT 1 FROM job AS e
    WHERE e.ordering_key = h.ordering_key AND e.seq IS NOT NULL AND e.passed_at IS NULL AND e.seq < h.seq)
ORDER BY h.finished_at, h.id
LIMIT ?1
