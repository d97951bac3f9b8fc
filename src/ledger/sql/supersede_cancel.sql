-- A submission with "on_duplicate": "cancel" (design §22.3): the PENDING job holding its dedupe
-- key is cancelled as an operator's cancel does (cancel.sql), so the submission is recorded in its
-- place.
-- params: ?1 dedupe_key, ?2 id, ?3 now
UPDATE job
SET status = 'DEAD', last_error = 'cancelled', finished_at = ?3, skipped_at = ?3, passed_at = ?3,
    cancel_requested_at = ?3, updated_at = ?3
WHERE dedupe_key = ?1 AND status = 'PENDING' AND finished_at IS NULL AND superseded_at IS NULL AND id <> ?2
RETURNING *
