-- A batch's members in its request's order, with how each finished so far (design §25).
-- params: ?1 batch_id
SELECT member_id, status, result, finished_at FROM batch_member WHERE batch_id = ?1 ORDER BY place
