-- A batch's members (design §25), recorded right after its callback's waits (wait_add.sql) and
-- only when those were: changes() is the number of waits that statement added (none for a
-- duplicate submission). ?2 is a JSON array of the members' ids, in the request's order.
-- params: ?1 id, ?2 members
INSERT OR IGNORE INTO batch_member (batch_id, member_id, place)
SELECT ?1, d.value, d.key FROM json_each(?2) AS d
WHERE changes() > 0
