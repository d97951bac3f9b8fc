-- Jobs per status (statuses with none are absent; the caller fills in zeros).
SELECT status, count(*) AS n FROM job GROUP BY status
