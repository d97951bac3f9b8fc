-- Runs per minute since ?1 by outcome, and redrives per minute (a redriven job is open again from
-- then), for the dashboard's charts. Served by job_event_at. ?1 since (ms)
-- params: ?1 since
SELECT at / 60000 AS minute, kind, outcome, count(*) AS n
FROM job_event
WHERE kind IN ('attempt', 'redrive') AND at >= ?1
GROUP BY minute, kind, outcome
