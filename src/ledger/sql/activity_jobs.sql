-- Jobs created and finished (DONE or DEAD) per minute since ?1: the backlog walks back from
-- today's count with these; and successful runs the job rows describe (complete.sql: ran_by set;
-- such a run has no history row). Each side is served by its index. ?1 since (ms)
-- params: ?1 since
SELECT 'created' AS what, created_at / 60000 AS minute, NULL AS status, count(*) AS n
FROM job WHERE created_at >= ?1 GROUP BY minute
UNION ALL
SELECT 'finished', finished_at / 60000, status, count(*)
FROM job WHERE finished_at >= ?1 AND finished_at IS NOT NULL GROUP BY finished_at / 60000, status
UNION ALL
SELECT 'ran', finished_at / 60000, NULL, count(*)
FROM job WHERE finished_at >= ?1 AND finished_at IS NOT NULL AND ran_by IS NOT NULL GROUP BY finished_at / 60000
