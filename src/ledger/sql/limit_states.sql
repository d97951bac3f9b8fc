-- Flow control (design §20): limit keys as operators see them, a page by name after ?1, with their
-- live permits (running jobs) and their line (parked jobs).
-- params: ?1 after, ?2 now, ?3 limit
SELECT s.*,
       (SELECT count(*) FROM limit_permit AS lp WHERE lp.limit_key = s.limit_key AND lp.until > ?2) AS running,
       (SELECT count(*) FROM limit_wait AS lw WHERE lw.limit_key = s.limit_key) AS waiting
FROM limit_state AS s
WHERE s.limit_key > ?1
ORDER BY s.limit_key
LIMIT ?3
