-- Pausing an ordering key (design §20.11): a row per paused key, in the key's shard, read by both
-- claims (claim_next.sql, claim.sql) and by maintenance's scans (overdue.sql, stalled_heads.sql),
-- so nothing of the key starts and nothing of it is re-sent while it is paused. Deleting the row
-- resumes the key.
CREATE TABLE key_pause (
  ordering_key TEXT PRIMARY KEY NOT NULL,
  paused_at INTEGER NOT NULL
) WITHOUT ROWID;
