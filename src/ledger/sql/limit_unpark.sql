-- Flow control (design §20): a job granted its permit (same batch) leaves its key's line.
-- params: ?1 limit_key, ?2 job_id, ?3 until
DELETE FROM limit_wait
WHERE limit_key = ?1 AND job_id = ?2
  AND EXISTS (SELECT 1 FROM limit_permit WHERE limit_key = ?1 AND job_id = ?2 AND until = ?3)
