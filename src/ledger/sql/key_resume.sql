-- An operator resumes an ordering key (design §20.11). Returns the pause it ended, if the key was
-- paused.
-- params: ?1 ordering_key
DELETE FROM key_pause WHERE ordering_key = ?1
RETURNING *
