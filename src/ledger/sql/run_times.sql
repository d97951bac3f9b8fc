-- The last hour's run times and queue waits, for the dashboard's time charts (design §27.6):
-- each DONE job's successful run (its row describes it: complete.sql) with the queue wait before
-- it (from its due time, which a claim keeps; for a job its claim recorded, from its send, as
-- observe.rs measures it), and each failed or snoozed run in history (its wait is not kept).
-- At most ?2 of each, the newest first: a busy hour is charted from its latest runs. Served by
-- job_finished and job_event_at (whose condition is spelled out for SQLite to
-- see the index applies). ?1 since (ms), ?2 most
-- params: ?1 since, ?2 most
SELECT * FROM (
  SELECT type, finished_at - started_at AS run_ms,
         max(0, started_at - CASE WHEN started_at = next_run_at THEN min(created_at, next_run_at)
                                  ELSE next_run_at END) AS wait_ms
  FROM job
  WHERE finished_at >= ?1 AND finished_at IS NOT NULL AND status = 'DONE' AND ran_by IS NOT NULL
    AND started_at IS NOT NULL
  ORDER BY finished_at DESC LIMIT CAST(?2 AS INTEGER))
UNION ALL
SELECT * FROM (
  SELECT (SELECT type FROM job WHERE job.id = job_event.job_id) AS type, at - started_at AS run_ms,
         NULL AS wait_ms
  FROM job_event
  WHERE kind IN ('attempt', 'redrive') AND kind = 'attempt' AND at >= ?1 AND started_at IS NOT NULL
  ORDER BY at DESC LIMIT CAST(?2 AS INTEGER))
