-- A resumed ordering key's PENDING jobs, oldest first, at most ?2 of each kind: unsequenced (lock
-- mode, job_lock_key) and sequenced (strict mode, API submissions, job_key_open). Their messages
-- were acked while the key was paused, so the resume sends them again (design §20.11).
-- params: ?1 ordering_key, ?2 limit
SELECT * FROM (SELECT * FROM job
               WHERE ordering_key = ?1 AND seq IS NULL AND finished_at IS NULL AND status = 'PENDING'
               ORDER BY created_at, id LIMIT ?2)
UNION ALL
SELECT * FROM (SELECT * FROM job
               WHERE ordering_key = ?1 AND seq IS NOT NULL AND passed_at IS NULL AND status = 'PENDING'
               ORDER BY seq LIMIT ?2)
