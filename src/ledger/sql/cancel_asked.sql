-- A run's watch (design §22.1): whether an operator asked the RUNNING job to stop. Read by id,
-- every CANCEL_CHECK_MS while a run goes on.
-- params: ?1 id
SELECT id FROM job WHERE id = ?1 AND cancel_requested_at IS NOT NULL
