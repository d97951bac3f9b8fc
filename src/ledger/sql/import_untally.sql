-- Moving a ledger: a finished job about to be copied again over its earlier copy leaves the tally
-- first (import_job.sql's INSERT OR REPLACE deletes the earlier row, which no trigger sees; its
-- insert counts the new one).
-- params: ?1 id
UPDATE job_tally SET n = n - 1
WHERE (status, type) IN (SELECT status, coalesce(type, '') FROM job WHERE id = ?1 AND finished_at IS NOT NULL)
