-- DEAD jobs matching an operator's filter, oldest death first, with how many match in all (the
-- window count is taken before LIMIT). Each filter is NULL for any: ?1 type, ?2 ordering_key,
-- ?3 text the error contains, ?4 died at or after (ms), ?5 died before (ms); ?6 limit
SELECT id, count(*) OVER () AS matched
FROM job
WHERE status = 'DEAD' AND (?1 IS NULL OR type = ?1) AND (?2 IS NULL OR ordering_key = ?2)
  AND (?3 IS NULL OR instr(last_error, ?3) > 0)
  AND (?4 IS NULL OR finished_at >= ?4) AND (?5 IS NULL OR finished_at < ?5)
ORDER BY finished_at, id
LIMIT ?6
