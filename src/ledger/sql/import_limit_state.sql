-- Moving a D1 ledger to shards: a limit key's state into its shard, replacing a copy made before.
-- params: ?1 limit_key, ?2 paused, ?3 tat_us, ?4 overridden, ?5 interval_us, ?6 tolerance_us, ?7 concurrency, ?8 trip_after, ?9 cooldown_ms, ?10 failures, ?11 opens, ?12 open_until, ?13 probe, ?14 updated_at, ?15 booked_us
INSERT OR REPLACE INTO limit_state (limit_key, paused, tat_us, overridden, interval_us, tolerance_us, concurrency,
                                    trip_after, cooldown_ms, failures, opens, open_until, probe, updated_at, booked_us)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, coalesce(?15, 0))
