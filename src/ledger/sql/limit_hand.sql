-- Flow control (design §20): the oldest ?2 jobs in a limit key's line are handed the slots that
-- woke them: each gets a permit until ?3 (the time its wake-up may take to arrive), so the next
-- ask of someone not in the line (the chain whose run just freed the slot, a job delivered
-- meanwhile) finds the key full and joins the line behind them, and the woken job, asking when it
-- arrives, is granted (limit_acquire.sql does not count a job's own permit). Without it the freed
-- slot went to whoever asked first, nearly always the chain that freed it, and the woken job,
-- refused, went to the back of the line: the line rotated and every wake-up was a wasted
-- delivery. A hand-off never lost: it lapses at ?3. Run just before limit_wake.sql, which takes the
-- same jobs out of the line. None while the key is paused.
-- params: ?1 limit_key, ?2 limit, ?3 until
INSERT INTO limit_permit (limit_key, job_id, until)
SELECT limit_key, job_id, ?3
FROM limit_wait
WHERE limit_key = ?1
  AND job_id IN (SELECT job_id FROM limit_wait WHERE limit_key = ?1 ORDER BY since, job_id LIMIT ?2)
  AND NOT EXISTS (SELECT 1 FROM limit_state WHERE limit_key = ?1 AND paused = 1)
ON CONFLICT (limit_key, job_id) DO UPDATE SET until = max(limit_permit.until, excluded.until)
