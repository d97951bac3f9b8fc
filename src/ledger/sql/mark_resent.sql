-- Takes an overdue job for re-sending: only if it is still PENDING at the due time we read, so two
-- maintenance runs never both re-send it. ?1 id, ?2 next_run_at as read, ?3 now
-- params: ?1 id, ?2 next_run_at, ?3 now
UPDATE job SET next_run_at = ?3, updated_at = ?3
WHERE id = ?1 AND status = 'PENDING' AND next_run_at = ?2
RETURNING *
