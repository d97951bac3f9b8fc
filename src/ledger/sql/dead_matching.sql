-- DEAD jobs matching an operator's filter: how many match, how many of them can be redriven, and
-- the first ?6 ids (redrivable ones first, then oldest death first; the window counts are taken
-- before LIMIT). A job cannot be redriven when it has no readable payload or its dedupe key is
-- active in another job (redrive.sql's guards): putting those first would stall every call on them.
-- Each filter is NULL for any: ?1 type, ?2 ordering_key, ?3 text the error contains, ?4 died at or
-- after (ms), ?5 died before (ms); ?6 limit
-- params: ?1 type, ?2 ordering_key, ?3 error, ?4 from, ?5 to, ?6 limit
SELECT id, finished_at, redrivable_now AS redrivable_row, count(*) OVER () AS matched,
       sum(redrivable_now) OVER () AS redrivable
FROM (
  SELECT id, finished_at,
         CASE WHEN payload IS NOT NULL AND (dedupe_key IS NULL OR NOT EXISTS (
           SELECT 1 FROM job AS other
           WHERE other.dedupe_key = job.dedupe_key AND other.finished_at IS NULL AND other.superseded_at IS NULL
             AND other.id <> job.id)) THEN 1 ELSE 0 END AS redrivable_now
  FROM job
  WHERE status = 'DEAD' AND (?1 IS NULL OR type = ?1) AND (?2 IS NULL OR ordering_key = ?2)
    AND (?3 IS NULL OR instr(last_error, ?3) > 0)
    AND (?4 IS NULL OR finished_at >= ?4) AND (?5 IS NULL OR finished_at < ?5))
ORDER BY redrivable_now DESC, finished_at, id
LIMIT ?6
