-- One job. ?1 id
-- params: ?1 id
SELECT * FROM job WHERE id = ?1
