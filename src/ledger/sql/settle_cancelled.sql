-- THE CANCEL RULE for a run (design §22.1), in the batch right after the run's transition
-- (complete, fail or snooze): a job whose cancel was requested while it ran ends DEAD "cancelled"
-- whatever its run did, a result it returned kept; it is marked skipped, so its key moves on in
-- strict mode. A row still RUNNING (the transition did not apply: the lease was lost) is left to
-- whoever holds it now.
-- params: ?1 id, ?2 now
UPDATE job
SET status = 'DEAD', last_error = 'cancelled', finished_at = ?2, skipped_at = ?2, passed_at = ?2,
    updated_at = ?2, lease_owner = NULL, lease_until = NULL
WHERE id = ?1 AND cancel_requested_at IS NOT NULL AND status <> 'RUNNING'
  AND (status <> 'DEAD' OR skipped_at IS NULL)
RETURNING *
