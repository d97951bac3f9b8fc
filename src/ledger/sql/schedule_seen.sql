-- A cron run saw schedule ?1's period ?2 (design §23.2): its job (?3, NULL when none was submitted:
-- paused, or a first sight late in the period) was submitted at ?4. The latest period seen only
-- moves forward: a run that saw an older period, finishing late, changes nothing.
-- params: ?1 name, ?2 period, ?3 job_id, ?4 now
INSERT INTO schedule (name, last_period, last_job_id, last_enqueued_at)
VALUES (?1, ?2, ?3, CASE WHEN ?3 IS NOT NULL THEN ?4 END)
ON CONFLICT (name) DO UPDATE SET
  last_period = excluded.last_period,
  last_job_id = coalesce(excluded.last_job_id, schedule.last_job_id),
  last_enqueued_at = coalesce(excluded.last_enqueued_at, schedule.last_enqueued_at)
WHERE schedule.last_period IS NULL OR schedule.last_period < excluded.last_period
