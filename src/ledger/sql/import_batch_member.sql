-- Moving a D1 ledger to shards: a batch's member into its callback's shard, replacing a copy made
-- before.
-- params: ?1 batch_id, ?2 member_id, ?3 place, ?4 status, ?5 result, ?6 finished_at
INSERT OR REPLACE INTO batch_member (batch_id, member_id, place, status, result, finished_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
