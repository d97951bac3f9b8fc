-- A submitted job's dependencies (design §24), recorded in the same batch as its insert, right
-- after it, and only when that insert made it: a duplicate submission never adds waits to the
-- job it duplicates. changes() is the row count of the batch's previous statement, the insert
-- (0 for a duplicate); a job just inserted is also PENDING, never attempted, created now. ?4 is a
-- JSON array of [dependency id, dependency route] pairs.
-- params: ?1 id, ?2 on_dead, ?3 now, ?4 deps
INSERT OR IGNORE INTO job_wait (job_id, on_id, on_route, on_dead, registered, created_at)
SELECT ?1, json_extract(d.value, '$[0]'), json_extract(d.value, '$[1]'), ?2, 0, ?3
FROM json_each(?4) AS d
WHERE changes() > 0
  AND EXISTS (SELECT 1 FROM job WHERE id = ?1 AND status = 'PENDING' AND attempts = 0 AND created_at = ?3)
