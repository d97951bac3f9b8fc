-- Flow control (design §20): a permit's job ended its run; its slot frees. ?4 says how the run
-- went, for the breaker ('succeeded', 'failed', or 'neither'): a success closes it; a failure
-- counts, and the one that reaches the key's trip_after, or the probe's, opens it for a cool-down
-- that doubles with each opening (flow::cooldown_ms), never shorter than ?5, the Retry-After the
-- failure carried. Failures while it is open do not extend it. Rows are written only when the
-- breaker's state changes.
-- params: ?1 limit_key, ?2 job_id, ?3 now, ?4 verdict, ?5 retry_after_ms, ?6 trip_after, ?7 cooldown_ms, ?8 max_cooldown_ms
UPDATE limit_state
SET failures = CASE WHEN ?4 = 'succeeded' THEN 0
                    WHEN probe = ?2 OR failures + 1 >= k THEN 0
                    ELSE failures + 1 END,
    opens = CASE WHEN ?4 = 'succeeded' THEN 0
                 WHEN probe = ?2 OR failures + 1 >= k THEN opens + 1
                 ELSE opens END,
    open_until = CASE WHEN ?4 = 'succeeded' THEN NULL
                      WHEN probe = ?2 OR failures + 1 >= k
                        THEN ?3 + max(min(base * (1 << min(opens, 20)), ?8), min(?5, ?8))
                      ELSE open_until END,
    probe = CASE WHEN ?4 = 'succeeded' OR probe = ?2 THEN NULL ELSE probe END,
    updated_at = ?3
FROM (SELECT CASE WHEN overridden = 1 THEN trip_after ELSE ?6 END AS k,
             CASE WHEN overridden = 1 THEN cooldown_ms ELSE ?7 END AS base
      FROM limit_state WHERE limit_key = ?1) AS b
WHERE limit_state.limit_key = ?1 AND b.k IS NOT NULL
  AND ((?4 = 'succeeded' AND (failures > 0 OR open_until IS NOT NULL))
       OR (?4 = 'failed' AND (open_until IS NULL OR probe = ?2)))
