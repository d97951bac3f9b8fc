-- Flow control (design §20): a job's permit to start, granted only if its limit key allows it now.
-- The key's policy is its run-time override when it has one, else the configured one (?5..?7).
-- Refused (no row back) when the key is paused; its breaker is open, or past its cool-down with
-- a live probe other than this job; as many permits are live as its concurrency allows; or its
-- throttle's next start (GCRA: the theoretical arrival time less the burst's tolerance) is more
-- than ?8 ms away: a start that near is granted, and the job waits for it in its invocation.
-- One statement, so it holds under any number of concurrent invocations. A slot handed to this
-- job (limit_hand.sql) is its: not counted against it, and taken over by its run. A permit another
-- run of this job took and still holds (a run that stalled past its lease may still be running)
-- counts like any other and is never taken over: a second run of a job is no exception to the
-- key's concurrency; one that lapsed is renewed.
-- params: ?1 limit_key, ?2 job_id, ?3 now, ?4 until, ?5 interval_us, ?6 tolerance_us, ?7 concurrency, ?8 pace_ms
INSERT INTO limit_permit (limit_key, job_id, until)
SELECT ?1, ?2, ?4
FROM (SELECT paused, tat_us, open_until, probe,
             CASE WHEN overridden = 1 THEN interval_us ELSE ?5 END AS iv,
             CASE WHEN overridden = 1 THEN tolerance_us ELSE ?6 END AS tol,
             CASE WHEN overridden = 1 THEN concurrency ELSE ?7 END AS cc
      FROM limit_state WHERE limit_key = ?1) AS s
WHERE s.paused = 0
  AND (s.open_until IS NULL
       OR (s.open_until <= ?3
           AND (s.probe IS NULL OR s.probe = ?2
                OR NOT EXISTS (SELECT 1 FROM limit_permit AS lp
                               WHERE lp.limit_key = ?1 AND lp.job_id = s.probe AND lp.until > ?3))))
  AND (s.cc IS NULL
       OR (SELECT count(*) FROM limit_permit AS lp
           WHERE lp.limit_key = ?1 AND lp.until > ?3 AND NOT (lp.job_id = ?2 AND lp.handed = 1)) < s.cc)
  AND (s.iv IS NULL OR max(s.tat_us, ?3 * 1000) - coalesce(s.tol, 0) <= (?3 + ?8) * 1000)
ON CONFLICT (limit_key, job_id) DO UPDATE SET until = excluded.until, handed = 0
WHERE limit_permit.handed = 1 OR limit_permit.until <= ?3
