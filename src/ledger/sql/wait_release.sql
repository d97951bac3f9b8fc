-- In the dependent's shard: its dependency ?2 finished; it no longer waits on it. Idempotent: a
-- release repeated (a lost answer, maintenance after a crash) deletes nothing.
-- params: ?1 job_id, ?2 on_id
DELETE FROM job_wait WHERE job_id = ?1 AND on_id = ?2
