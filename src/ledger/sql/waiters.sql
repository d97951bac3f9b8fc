-- In a finished job's shard: the jobs waiting on it, to release, with how it finished as its row
-- says now (a run's DONE record can be settled DEAD "cancelled" in the same batch, and a job
-- redriven since it finished is open again: nothing to release yet).
-- params: ?1 on_id
SELECT edge.on_id, edge.job_id, edge.job_route, j.status AS on_status, j.result AS on_result
FROM job_waiter AS edge CROSS JOIN job AS j ON j.id = edge.on_id
WHERE edge.on_id = ?1 AND j.finished_at IS NOT NULL
