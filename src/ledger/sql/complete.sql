-- RUNNING -> DONE, only by the lease owner, keeping what the run returned.
-- ?1 id, ?2 lease_owner, ?3 now, ?4 result (JSON text) or NULL
UPDATE job
SET status = 'DONE', lease_owner = NULL, lease_until = NULL, finished_at = ?3, updated_at = ?3, result = ?4
WHERE id = ?1 AND status = 'RUNNING' AND lease_owner = ?2
RETURNING *
