-- Appends an event to a job's history ring (migrations/0004): event n goes to slot n % 20,
-- replacing the oldest once the ring is full. An operator's action is audited only if it applied:
-- with ?11 given, only when the job is now in that status and was updated at ?2, and with ?12 = 1
-- only when the statement just before this one (the action, in the same batch) changed a row.
-- A successful run has no history row: its DONE row describes it (complete.sql).
-- (?10 keep: the ring's size; ?11 status: the status the action left, or NULL; ?12 after_change: 1
-- to require the change.)
-- params: ?1 job_id, ?2 at, ?3 kind, ?4 actor, ?5 attempt, ?6 started_at, ?7 outcome, ?8 error, ?9 http_status, ?10 keep, ?11 status, ?12 after_change
INSERT OR REPLACE INTO job_event (job_id, slot, n, at, kind, actor, attempt, started_at, outcome, error, http_status)
SELECT ?1, last.n % CAST(?10 AS INTEGER), last.n, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9
FROM (SELECT coalesce(max(n), 0) + 1 AS n FROM job_event WHERE job_id = ?1) AS last
WHERE (?11 IS NULL OR EXISTS (SELECT 1 FROM job WHERE id = ?1 AND status = ?11 AND updated_at = ?2))
  AND (?12 = 0 OR changes() > 0)
