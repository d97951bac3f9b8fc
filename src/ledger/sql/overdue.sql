-- PENDING jobs due before ?1 (now minus a grace period): their message was probably lost. With
-- ?3 = 'strict', jobs in a key's sequence are left to the stalled-head scan (only a key's head
-- needs a message). Most urgent first (SPEC 12): when more are overdue than one run re-sends,
-- the urgent ones go first. ?1 due_before, ?2 limit, ?3 ordering mode
SELECT * FROM job
WHERE status = 'PENDING' AND next_run_at <= ?1 AND (?3 <> 'strict' OR seq IS NULL)
ORDER BY priority, next_run_at
LIMIT ?2
