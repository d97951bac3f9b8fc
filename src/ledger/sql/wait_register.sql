-- In the dependency's shard: note that ?2 waits on ?1, only while ?1 is unfinished, so whichever
-- comes first in this shard (this, or the transition finishing ?1) sees the other: a finish after
-- this finds the waiter; a finish before it leaves no row, and the caller, reading ?1 back in the
-- same batch, releases the dependent itself (design §24).
-- params: ?1 on_id, ?2 job_id, ?3 job_route
INSERT OR IGNORE INTO job_waiter (on_id, job_id, job_route)
SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM job WHERE id = ?1 AND finished_at IS NULL)
