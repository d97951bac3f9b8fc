-- An operator pauses an ordering key (design §20.11): nothing of it starts until it is resumed. A
-- key paused again keeps its first pause's time. Returns the pause.
-- params: ?1 ordering_key, ?2 now
INSERT INTO key_pause (ordering_key, paused_at) VALUES (?1, ?2)
ON CONFLICT (ordering_key) DO UPDATE SET paused_at = key_pause.paused_at
RETURNING *
