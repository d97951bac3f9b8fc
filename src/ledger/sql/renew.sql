-- Extends every lease an invocation holds. ?1 lease_owner, ?2 now, ?3 lease_until
UPDATE job SET lease_until = ?3, updated_at = ?2
WHERE status = 'RUNNING' AND lease_owner = ?1
RETURNING id
