-- A resumed ordering key's PENDING jobs, at most ?2 of each kind: unsequenced (lock mode,
-- job_lock_key) and sequenced (strict mode, and API submissions in either mode, job_key_open).
-- Their messages were acked while the key was paused, so the resume sends them again (design
-- §20.11), in the order they were first sent: one key in lock mode holds both kinds, so the two
-- are merged by when each job was created (its message's send time, or its submission; the jobs
-- of one request share that time, and their seq orders them).
-- params: ?1 ordering_key, ?2 limit
SELECT * FROM (SELECT * FROM job
               WHERE ordering_key = ?1 AND seq IS NULL AND finished_at IS NULL AND status = 'PENDING'
               ORDER BY created_at, id LIMIT ?2)
UNION ALL
SELECT * FROM (SELECT * FROM job
               WHERE ordering_key = ?1 AND seq IS NOT NULL AND passed_at IS NULL AND status = 'PENDING'
               ORDER BY seq LIMIT ?2)
ORDER BY created_at, seq, id
