-- Flow control (design §20): a limit key as operators see it (?1), with its live
-- permits (running jobs) and its line (parked jobs).
-- params: ?1 limit_key, ?2 now
SELECT s.*,
       (SELECT count(*) FROM limit_permit AS lp WHERE lp.limit_key = s.limit_key AND lp.until > ?2) AS running,
       (SELECT count(*) FROM limit_wait AS lw WHERE lw.limit_key = s.limit_key) AS waiting
FROM limit_state AS s
WHERE s.limit_key = ?1
