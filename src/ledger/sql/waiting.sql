-- A dependent after a release: its row, and whether it still waits on anything.
-- params: ?1 id
SELECT *, EXISTS (SELECT 1 FROM job_wait WHERE job_id = ?1) AS waits FROM job WHERE id = ?1
