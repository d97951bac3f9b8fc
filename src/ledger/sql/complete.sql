-- RUNNING -> DONE, only by the lease owner. ?1 id, ?2 lease_owner, ?3 now
UPDATE job
SET status = 'DONE', lease_owner = NULL, lease_until = NULL, finished_at = ?3, updated_at = ?3
WHERE id = ?1 AND status = 'RUNNING' AND lease_owner = ?2
RETURNING *
