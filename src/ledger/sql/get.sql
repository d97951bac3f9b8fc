-- One job, with the dependencies it still waits on and the jobs still waiting on it (design §24).
-- params: ?1 id
SELECT *,
  (SELECT json_group_array(on_id) FROM job_wait WHERE job_id = ?1) AS waiting_on,
  (SELECT json_group_array(job_id) FROM (SELECT job_id FROM job_waiter WHERE on_id = ?1 ORDER BY job_id)) AS waited_by
FROM job WHERE id = ?1
