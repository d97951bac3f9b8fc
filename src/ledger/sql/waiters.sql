-- In a finished job's shard: the jobs waiting on it, to release, with how it finished as its row
-- says now (a run's DONE record can be settled DEAD "cancelled" in the same batch, and a job
-- redriven since it finished is open again: nothing to release yet).
-- At most ?2 (a page: the rest stay, and maintenance's sweep releases them, waiters_finished.sql).
-- params: ?1 on_id, ?2 limit
SELECT edge.on_id, edge.job_id, edge.job_route, j.status AS on_status, j.result AS on_result
FROM job_waiter AS edge CROSS JOIN job AS j ON j.id = edge.on_id
WHERE edge.on_id = ?1 AND j.finished_at IS NOT NULL
LIMIT ?2
