-- An operator pauses (?2 = the time) or resumes (?2 NULL) schedule ?1 (design §23.3). A schedule
-- paused again keeps its first pause's time. Returns the row.
-- params: ?1 name, ?2 paused_at
INSERT INTO schedule (name, paused_at) VALUES (?1, ?2)
ON CONFLICT (name) DO UPDATE SET paused_at = CASE WHEN ?2 IS NULL THEN NULL ELSE coalesce(schedule.paused_at, ?2) END
RETURNING name, last_period, last_job_id, last_enqueued_at, paused_at
