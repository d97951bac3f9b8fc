-- Moving a D1 ledger to shards (design §19.7): a page of whole job rows in id order, after ?1.
-- params: ?1 after, ?2 limit
SELECT * FROM job WHERE id > ?1 ORDER BY id LIMIT ?2
