-- Flow control (design §20): limit keys as operators see them, by name after ?1 (or only ?4, when
-- given), with their live permits (running jobs) and their line (parked jobs).
-- params: ?1 after, ?2 now, ?3 limit, ?4 only
SELECT s.*,
       (SELECT count(*) FROM limit_permit AS p WHERE p.limit_key = s.limit_key AND p.until > ?2) AS running,
       (SELECT count(*) FROM limit_wait AS w WHERE w.limit_key = s.limit_key) AS waiting
FROM limit_state AS s
WHERE (?4 IS NULL AND s.limit_key > ?1) OR s.limit_key = ?4
ORDER BY s.limit_key
LIMIT ?3
