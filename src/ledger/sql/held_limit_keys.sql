-- GET /metrics: the limit keys of this shard whose flow control holds their jobs back now: paused,
-- its breaker open at ?1, or jobs waiting in its line for a slot (a permit still live at ?1) or
-- for the throttle (a start booked after ?1). A line whose every permit has run out and whose
-- throttle is free holds nothing: its jobs wait for maintenance to wake them, which is the
-- consumer's lag (a dead cron shows). Their due jobs are not the consumer's lag
-- (metrics_limited_due.sql). As many rows as such keys.
-- params: ?1 now
SELECT limit_key FROM limit_state WHERE paused = 1 OR open_until > ?1
UNION
SELECT DISTINCT line.limit_key FROM limit_wait AS line
WHERE EXISTS (SELECT 1 FROM limit_permit AS permit WHERE permit.limit_key = line.limit_key AND permit.until > ?1)
   OR EXISTS (SELECT 1 FROM limit_state AS st WHERE st.limit_key = line.limit_key AND st.booked_us > ?1 * 1000)
