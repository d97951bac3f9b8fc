-- In the dependent's shard: its wait on ?2 is registered in the dependency's shard.
-- params: ?1 job_id, ?2 on_id
UPDATE job_wait SET registered = 1 WHERE job_id = ?1 AND on_id = ?2
