-- Moving a D1 ledger to shards (design §19.7): what a page of jobs is, to compare a source's with
-- its shards' reading no more than the page: each job's row as a write changes it (status,
-- updated_at, attempts, its payload's and result's length) and how many history rows, waits,
-- waiters and batch members it has, each one probe of its table's key. The source reads the
-- page after ?1 (at most ?3 jobs, ?2 past every id); each shard the same ids, up to ?2.
-- params: ?1 after, ?2 upto, ?3 limit
SELECT id, status, updated_at, attempts, length(payload) AS payload_bytes, length(result) AS result_bytes,
  (SELECT count(*) FROM job_event WHERE job_event.job_id = job.id) AS events,
  (SELECT count(*) FROM job_wait WHERE job_wait.job_id = job.id) AS waits,
  (SELECT count(*) FROM job_waiter WHERE job_waiter.on_id = job.id) AS waiters,
  (SELECT count(*) FROM batch_member WHERE batch_member.batch_id = job.id) AS members
FROM job
WHERE id > ?1 AND id <= ?2
ORDER BY id
LIMIT ?3
