-- Extends the leases an invocation holds on the jobs it claimed (?4, a JSON array of their ids):
-- each found by its id, so a renewal reads those rows alone, never the table. A job no longer
-- RUNNING under ?1 (finished, or its lease reaped and taken) is left alone and not returned.
-- params: ?1 lease_owner, ?2 now, ?3 lease_until, ?4 ids
UPDATE job SET lease_until = ?3, updated_at = ?2
WHERE id IN (SELECT value FROM json_each(?4)) AND status = 'RUNNING' AND lease_owner = ?1
RETURNING id
