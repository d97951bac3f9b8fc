-- GET /metrics: the limit keys of this shard whose flow control holds their jobs back now: paused,
-- its breaker open at ?1, or jobs waiting in its line for a slot or the throttle. Their due jobs
-- are not the consumer's lag (metrics_limited_due.sql). As many rows as such keys.
-- params: ?1 now
SELECT limit_key FROM limit_state WHERE paused = 1 OR open_until > ?1
UNION
SELECT DISTINCT limit_key FROM limit_wait
