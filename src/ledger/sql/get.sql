-- One job, with the dependencies it still waits on (design §24). ?1 id
-- params: ?1 id
SELECT *, (SELECT json_group_array(on_id) FROM job_wait WHERE job_id = ?1) AS waiting_on FROM job WHERE id = ?1
