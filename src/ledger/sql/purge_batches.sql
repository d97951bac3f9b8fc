-- The members' rows of the batches whose callbacks purge.sql is about to delete (same ?1 before,
-- ?2 limit, same order): a batch is kept as long as its callback (design §25).
-- params: ?1 before, ?2 limit
DELETE FROM batch_member
WHERE batch_id IN (SELECT id FROM job WHERE finished_at < ?1 AND status = 'DONE' ORDER BY finished_at LIMIT ?2)
