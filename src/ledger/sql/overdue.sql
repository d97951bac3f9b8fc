-- PENDING jobs due before ?1 (now minus a grace period): their message was probably lost.
-- ?1 due_before, ?2 limit
SELECT * FROM job WHERE status = 'PENDING' AND next_run_at <= ?1 ORDER BY next_run_at LIMIT ?2
