-- Moving a ledger: a finished job copied in with a finished_at before where this ledger's purge
-- of its status stands (a move run again once the shards' cron has purged) moves that purge back
-- to it, so the purge reaches it in its turn instead of keeping it for ever (design §28).
-- params: ?1 id
UPDATE purge_cursor
SET until = (SELECT finished_at FROM job WHERE id = ?1)
WHERE name = (SELECT status FROM job WHERE id = ?1 AND finished_at IS NOT NULL)
  AND until > (SELECT finished_at FROM job WHERE id = ?1)
