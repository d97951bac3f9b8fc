-- Maintenance (design §24): waiters of jobs that have finished, left unreleased (the finishing
-- invocation died before releasing them, or the job was finished by the reaper, a deadline, an
-- undeliverable message). Their dependents are released as after any finish. The finished job's
-- keys give its route. CROSS JOIN keeps SQLite's planner reading the few waiters and probing each
-- one's job, not every finished job (the finished_at index) for waiters.
-- params: ?1 limit
SELECT edge.on_id, edge.job_id, edge.job_route, j.status AS on_status, j.result AS on_result, j.ordering_key, j.dedupe_key
FROM job_waiter AS edge CROSS JOIN job AS j ON j.id = edge.on_id
WHERE j.finished_at IS NOT NULL
LIMIT ?1
