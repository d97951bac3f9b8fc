-- Strict mode's liveness scan (SPEC 3b.6): heads that are PENDING and due since before ?1 while
-- no job of their key runs: their wake-up was lost (or never sent). ?1 due_before, ?2 on_dead, ?3 limit
SELECT * FROM job AS h
WHERE h.status = 'PENDING' AND h.seq IS NOT NULL AND h.next_run_at <= ?1
  AND NOT EXISTS (
    SELECT 1 FROM job AS e
    WHERE e.ordering_key = h.ordering_key AND e.seq IS NOT NULL AND e.status <> 'DONE' AND e.seq < h.seq
      AND NOT (e.status = 'DEAD' AND (?2 = 'skip' OR e.skipped_at IS NOT NULL)))
  AND NOT EXISTS (
    SELECT 1 FROM job AS r
    WHERE r.ordering_key = h.ordering_key AND r.seq IS NOT NULL AND r.status <> 'DONE' AND r.status = 'RUNNING')
ORDER BY h.priority, h.next_run_at
LIMIT ?3
