-- Runs per minute since ?1 by outcome, for the dashboard's charts. ?1 since (ms)
SELECT at / 60000 AS minute, outcome, count(*) AS n
FROM job_event
WHERE kind = 'attempt' AND at >= ?1
GROUP BY minute, outcome
