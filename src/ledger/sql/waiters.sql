-- In a finished job's shard: the jobs waiting on it, to release.
-- params: ?1 on_id
SELECT on_id, job_id, job_route FROM job_waiter WHERE on_id = ?1
