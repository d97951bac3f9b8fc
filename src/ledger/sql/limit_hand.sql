-- Flow control (design §20): the oldest ?2 jobs in a limit key's line are handed the slots free
-- now: each gets a permit until ?4 (the time its wake-up may take to arrive), so the next ask of
-- someone not in the line (the chain whose run just freed the slot, a job delivered meanwhile)
-- finds the key full and joins the line behind them, and the woken job, asking when it arrives,
-- is granted (limit_acquire.sql does not count a job's own permit). Without it the freed slot
-- went to whoever asked first, nearly always the chain that freed it, and the woken job, refused,
-- went to the back of the line: the line rotated and every wake-up was a wasted delivery. Only
-- slots really free are handed (a run whose permit had lapsed frees none), so a hand-off never
-- takes the key past its concurrency; one whose job never comes lapses at ?4. limit_wake.sql then
-- takes the jobs handed a slot out of the line. None while the key is paused. A hand-off replaces a
-- lapsed permit of the job's earlier run and is a hand-off still (handed = 1): left a permit, it
-- was a slot nobody ran in, its job not woken, the key held until it lapsed (the simulation's
-- permit check found it). While the key's breaker is not closed, one job at most, and only while
-- no other job holds a hand-off or runs as the probe: that job waits for the cool-down and probes,
-- and the probe's success, closing the breaker, hands every slot then free (a release asks for
-- all of them): handing one then left a key of concurrency 8 running its line one job at a time
-- (issue 38). A run started before the trip that ends while the probe runs hands nothing: handed
-- then, its job was refused for the probe on arrival and parked again (the simulation's line check
-- found a line standing still behind such hand-offs). A job back in the line holds no hand-off
-- (limit_unhand.sql), so every live permit counts here.
-- params: ?1 limit_key, ?2 limit, ?3 now, ?4 until, ?5 concurrency
INSERT INTO limit_permit (limit_key, job_id, until, handed)
SELECT ?1, line.job_id, ?4, 1
FROM (SELECT job_id, row_number() OVER (ORDER BY since, job_id) AS place
      FROM limit_wait WHERE limit_key = ?1
      ORDER BY since, job_id
      LIMIT ?2) AS line,
     (SELECT paused, open_until, probe, CASE WHEN overridden = 1 THEN concurrency ELSE ?5 END AS cc
      FROM limit_state WHERE limit_key = ?1) AS s
WHERE s.paused = 0
  AND (s.open_until IS NULL
       OR (line.place = 1
           AND NOT EXISTS (SELECT 1 FROM limit_permit AS lp
                           WHERE lp.limit_key = ?1 AND lp.until > ?3 AND (lp.handed = 1 OR lp.job_id = s.probe))))
  AND (s.cc IS NULL
       OR line.place <= s.cc - (SELECT count(*) FROM limit_permit AS lp WHERE lp.limit_key = ?1 AND lp.until > ?3))
ON CONFLICT (limit_key, job_id) DO UPDATE SET until = excluded.until, handed = 1
WHERE limit_permit.handed = 1 OR limit_permit.until <= ?3
