-- In the callback's shard, after a release: once a batch's callback waits on nothing more, its
-- payload gets the batch (design §25), `{"id", "jobs": [{"id", "status", "result"}]}` in the
-- members' order, under "batch" (a webhook's under its body, which it posts). Past ?2 bytes of
-- results the results are left out and "results" names GET /batches/{id} instead, so the
-- callback's payload and its message stay small. A result that is not JSON (a sensitive job's,
-- sealed) is null. Only a PENDING callback, once.
-- params: ?1 job_id, ?2 limit
UPDATE job
SET payload = (
  SELECT CASE WHEN json_extract(job.payload, '$.type') = 'webhook'
              THEN json_set(job.payload, '$.body',
                            json_set(coalesce(json_extract(job.payload, '$.body'), '{}'), '$.batch', json(b.batch)))
              ELSE json_set(job.payload, '$.batch', json(b.batch)) END
  FROM (SELECT CASE WHEN coalesce(sum(length(result)), 0) <= ?2
                    THEN json_object('id', ?1, 'jobs', json_group_array(json_object(
                           'id', member_id, 'status', status,
                           'result', CASE WHEN json_valid(result) THEN json(result) END)))
                    ELSE json_object('id', ?1, 'results', '/batches/' || ?1, 'jobs', json_group_array(json_object(
                           'id', member_id, 'status', status)))
               END AS batch
        FROM (SELECT * FROM batch_member WHERE batch_id = ?1 ORDER BY place)) AS b)
WHERE id = ?1 AND status = 'PENDING' AND json_valid(payload)
  AND json_extract(payload, '$.batch') IS NULL AND json_extract(payload, '$.body.batch') IS NULL
  AND NOT EXISTS (SELECT 1 FROM job_wait WHERE job_id = ?1)
  AND EXISTS (SELECT 1 FROM batch_member WHERE batch_id = ?1)
