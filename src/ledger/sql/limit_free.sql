-- Flow control (design §20): a permit's job ended its run: its permit goes.
-- params: ?1 limit_key, ?2 job_id
DELETE FROM limit_permit WHERE limit_key = ?1 AND job_id = ?2
