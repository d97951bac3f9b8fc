-- Moving a D1 ledger to shards (design §19.7): how many rows each table a move copies besides jobs
-- holds, to compare a source with its shards. A history row, wait, waiter or batch member counts
-- only while the job whose shard holds it exists: a copy has nowhere to put one without.
-- params: none
SELECT
  (SELECT count(*) FROM job_event WHERE job_id IN (SELECT id FROM job)) AS job_event,
  (SELECT count(*) FROM job_wait WHERE job_id IN (SELECT id FROM job)) AS job_wait,
  (SELECT count(*) FROM job_waiter WHERE on_id IN (SELECT id FROM job)) AS job_waiter,
  (SELECT count(*) FROM batch_member WHERE batch_id IN (SELECT id FROM job)) AS batch_member,
  (SELECT count(*) FROM limit_state) AS limit_state,
  (SELECT count(*) FROM limit_permit) AS limit_permit,
  (SELECT count(*) FROM limit_wait) AS limit_wait,
  (SELECT count(*) FROM key_pause) AS key_pause,
  (SELECT count(*) FROM schedule) AS schedule
