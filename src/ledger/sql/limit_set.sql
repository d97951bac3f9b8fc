-- Flow control (design §20): an operator pauses or resumes a limit key, or sets its policy in
-- place of the configured one (?3 = 1) or gives it back (?3 = 0). ?2 NULL leaves paused as it is.
-- params: ?1 limit_key, ?2 paused, ?3 overridden, ?4 interval_us, ?5 tolerance_us, ?6 concurrency, ?7 trip_after, ?8 cooldown_ms, ?9 now, ?10 keep_policy
INSERT INTO limit_state (limit_key, paused, overridden, interval_us, tolerance_us, concurrency, trip_after,
                         cooldown_ms, updated_at)
VALUES (?1, coalesce(?2, 0), ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (limit_key) DO UPDATE SET
  paused = coalesce(?2, limit_state.paused),
  overridden = CASE WHEN ?10 = 1 THEN limit_state.overridden ELSE excluded.overridden END,
  interval_us = CASE WHEN ?10 = 1 THEN limit_state.interval_us ELSE excluded.interval_us END,
  tolerance_us = CASE WHEN ?10 = 1 THEN limit_state.tolerance_us ELSE excluded.tolerance_us END,
  concurrency = CASE WHEN ?10 = 1 THEN limit_state.concurrency ELSE excluded.concurrency END,
  trip_after = CASE WHEN ?10 = 1 THEN limit_state.trip_after ELSE excluded.trip_after END,
  cooldown_ms = CASE WHEN ?10 = 1 THEN limit_state.cooldown_ms ELSE excluded.cooldown_ms END,
  updated_at = excluded.updated_at
