-- In the dependent's shard, its dependency ?2 having ended DEAD: a PENDING dependent waiting on it
-- that did not choose to run anyway ("after_dead": "run") ends DEAD too, saying which (design §24).
-- Passed like a cancelled job: in strict mode it never blocks its key (ON_DEAD is for failures).
-- params: ?1 job_id, ?2 on_id, ?3 now, ?4 error
UPDATE job
SET status = 'DEAD', last_error = ?4, finished_at = ?3, skipped_at = ?3, passed_at = ?3, updated_at = ?3
WHERE id = ?1 AND status = 'PENDING'
  AND EXISTS (SELECT 1 FROM job_wait WHERE job_id = ?1 AND on_id = ?2 AND on_dead = 'dead')
RETURNING *
