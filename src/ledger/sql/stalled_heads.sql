-- Strict mode's liveness scan (design §3b.6): heads that are PENDING and due since before ?1 while
-- no job of their key runs: their wake-up was lost (or never sent). Reads the open jobs of every
-- key (job_key_open); a job's key-mates before it are one index probe each. A paused key is not
-- stalled (design §20.11): its resume wakes it; nor is a head waiting on a dependency (design §24):
-- the dependency's finish wakes it.
-- params: ?1 due_before, ?2 on_dead, ?3 limit
SELECT * FROM job AS h
WHERE h.seq IS NOT NULL AND h.passed_at IS NULL AND h.status = 'PENDING' AND h.next_run_at <= ?1
  AND NOT EXISTS (
    SELECT 1 FROM job AS e
    WHERE e.ordering_key = h.ordering_key AND e.seq IS NOT NULL AND e.passed_at IS NULL AND e.seq < h.seq
      AND NOT (e.status = 'DEAD' AND ?2 = 'skip'))
  AND NOT EXISTS (
    SELECT 1 FROM job AS r
    WHERE r.ordering_key = h.ordering_key AND r.seq IS NOT NULL AND r.passed_at IS NULL AND r.status = 'RUNNING')
  AND NOT EXISTS (SELECT 1 FROM key_pause WHERE key_pause.ordering_key = h.ordering_key)
  AND NOT EXISTS (SELECT 1 FROM job_wait WHERE job_wait.job_id = h.id)
ORDER BY h.priority, h.next_run_at
LIMIT ?3
