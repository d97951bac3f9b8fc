-- In the dependency's shard: dependent ?2 is released from ?1.
-- params: ?1 on_id, ?2 job_id
DELETE FROM job_waiter WHERE on_id = ?1 AND job_id = ?2
