-- PENDING jobs due before ?1 (now minus a grace period): their message was probably lost. With
-- ?3 = 'strict', jobs in a key's sequence are left to the stalled-head scan (only a key's head
-- needs a message). Most urgent first (design §12): when more are overdue than one run re-sends,
-- the urgent ones go first. Unsequenced jobs are read through job_open, sequenced ones (lock mode
-- after strict mode) through job_key_open. A paused key's jobs are left alone (design §20.11):
-- its resume sends them; so are jobs waiting on a dependency (design §24): its finish sends them. ?1 due_before, ?2 limit, ?3 ordering mode
-- params: ?1 due_before, ?2 limit, ?3 mode
SELECT * FROM job
WHERE finished_at IS NULL AND seq IS NULL AND next_run_at <= ?1 AND status = 'PENDING'
  AND NOT EXISTS (SELECT 1 FROM key_pause WHERE key_pause.ordering_key = job.ordering_key)
  AND NOT EXISTS (SELECT 1 FROM job_wait WHERE job_wait.job_id = job.id)
UNION ALL
SELECT * FROM job
WHERE ?3 <> 'strict' AND seq IS NOT NULL AND passed_at IS NULL AND status = 'PENDING' AND next_run_at <= ?1
  AND NOT EXISTS (SELECT 1 FROM key_pause WHERE key_pause.ordering_key = job.ordering_key)
  AND NOT EXISTS (SELECT 1 FROM job_wait WHERE job_wait.job_id = job.id)
ORDER BY priority, next_run_at
LIMIT ?2
