-- THE SUPERSEDE RULE, its second half (design §22.3): a RUNNING job holding the dedupe key of a
-- submission with "on_duplicate" "replace" or "cancel" is not changed underneath its run: it is
-- marked superseded, which takes it out of the key's uniqueness (migration 0015), so the
-- submission is recorded as a new job beside it; with "cancel" (?4 = 1) it is also asked to stop
-- (cancel.sql). It keeps its dedupe key, so its route (which shard holds it) never changes.
-- params: ?1 dedupe_key, ?2 id, ?3 now, ?4 cancel
UPDATE job
SET superseded_at = ?3, updated_at = ?3,
    cancel_requested_at = CASE WHEN ?4 = 1 THEN coalesce(cancel_requested_at, ?3) ELSE cancel_requested_at END
WHERE dedupe_key = ?1 AND status = 'RUNNING' AND finished_at IS NULL AND superseded_at IS NULL AND id <> ?2
RETURNING *
