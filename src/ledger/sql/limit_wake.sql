-- Flow control (design §20): the jobs in a limit key's line that were just handed a slot
-- (limit_hand.sql, same batch: a handed permit until ?2) leave it, to be sent again (their rows
-- are in their own shards: each comes with its route). A job no slot was free for stays in line.
-- params: ?1 limit_key, ?2 until
DELETE FROM limit_wait
WHERE limit_key = ?1
  AND job_id IN (SELECT job_id FROM limit_permit WHERE limit_key = ?1 AND handed = 1 AND until = ?2)
RETURNING job_id, route
