-- Moving a D1 ledger to shards: the history rows of the jobs of a page (ids after ?1, up to ?2).
-- params: ?1 after, ?2 last
SELECT * FROM job_event WHERE job_id > ?1 AND job_id <= ?2
