-- In the dependency's shard, right after a registration (wait_register.sql): the dependency as it
-- stands, and when it was last redriven (design §24.3): a dependency redriven since the wait was
-- recorded ended DEAD after its dependent was, and that death is the dependent's to answer for.
-- params: ?1 on_id
SELECT *, (SELECT max(at) FROM job_event WHERE job_id = ?1 AND kind = 'redrive') AS redriven_at
FROM job WHERE id = ?1
