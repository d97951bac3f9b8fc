-- Flow control (design §20): what the permit batch decided for one job: granted, parked in the
-- key's line, or refused until a time (the breaker's cool-down, the start booked for it by the
-- throttle); when granted, the start (the throttle's, now or up to the pace ahead); and the
-- throttle's interval in force (a grant is good for one interval: see consumer/gate.rs).
-- params: ?1 limit_key, ?2 job_id, ?3 until, ?4 tolerance_us, ?5 interval_us
SELECT EXISTS (SELECT 1 FROM limit_permit WHERE limit_key = ?1 AND job_id = ?2 AND until = ?3) AS granted,
       EXISTS (SELECT 1 FROM limit_wait WHERE limit_key = ?1 AND job_id = ?2) AS parked,
       paused, open_until,
       booked_us - (CASE WHEN overridden = 1 THEN interval_us ELSE ?5 END) AS booked_at_us,
       tat_us - (CASE WHEN overridden = 1 THEN interval_us ELSE ?5 END)
         - coalesce(CASE WHEN overridden = 1 THEN tolerance_us ELSE ?4 END, 0) AS start_at_us,
       CASE WHEN overridden = 1 THEN interval_us ELSE ?5 END AS interval_us
FROM limit_state WHERE limit_key = ?1
