-- Maintenance (design §24): waits a submission recorded but did not register in their
-- dependency's shard (it died between its steps), recorded before ?1; registered again. The
-- dependent's keys give its route. Newest first: a wait on a job never recorded (its request
-- failed in that job's shard and was not retried) stays unregistered, and however many such
-- waits there are, they never keep a newer one from its turn.
-- params: ?1 before, ?2 limit
SELECT edge.job_id, edge.on_id, edge.on_route, edge.created_at, j.id, j.ordering_key, j.dedupe_key
FROM job_wait AS edge CROSS JOIN job AS j ON j.id = edge.job_id
WHERE edge.registered = 0 AND edge.created_at <= ?1
ORDER BY edge.created_at DESC
LIMIT ?2
