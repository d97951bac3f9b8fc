-- Every schedule's row (design §23): the latest period seen, its job, and whether it is paused.
-- params: none
SELECT name, last_period, last_job_id, last_enqueued_at, paused_at FROM schedule ORDER BY name
