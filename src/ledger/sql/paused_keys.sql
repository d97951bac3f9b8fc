-- Paused ordering keys by name after ?1, at most ?2, each with how many of its jobs wait (PENDING,
-- of either kind: see key_waiting.sql).
-- params: ?1 after, ?2 limit
SELECT pause.ordering_key, pause.paused_at,
       (SELECT count(*) FROM job
        WHERE job.ordering_key = pause.ordering_key AND job.seq IS NULL AND job.finished_at IS NULL
          AND job.status = 'PENDING')
     + (SELECT count(*) FROM job
        WHERE job.ordering_key = pause.ordering_key AND job.seq IS NOT NULL AND job.passed_at IS NULL
          AND job.status = 'PENDING') AS waiting
FROM key_pause AS pause
WHERE pause.ordering_key > ?1
ORDER BY pause.ordering_key
LIMIT ?2
