-- In the callback's shard, as member ?2 of batch ?1 releases it: how it finished, and what it
-- returned (design §25). Nothing for a dependent that is no batch's callback.
-- params: ?1 job_id, ?2 on_id, ?3 status, ?4 result, ?5 now
UPDATE batch_member SET status = ?3, result = ?4, finished_at = ?5
WHERE batch_id = ?1 AND member_id = ?2 AND status IS NULL
