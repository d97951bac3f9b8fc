-- Flow control (design §20): a limit key's state row, made the first time one of its jobs asks to
-- start. An existing row is left alone (nothing written).
-- params: ?1 limit_key, ?2 now
INSERT INTO limit_state (limit_key, updated_at) VALUES (?1, ?2)
ON CONFLICT (limit_key) DO NOTHING
