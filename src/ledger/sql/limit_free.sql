-- Flow control (design §20): a permit's job ended its run: its permit goes, if it is still the
-- one its ask took (until ?3). A run that ends after its lease lapsed may find its job claimed
-- again and holding a newer permit, that run's slot: freeing it would let one more start than the
-- key's concurrency (the simulation found it), so it is left to that run.
-- params: ?1 limit_key, ?2 job_id, ?3 until
DELETE FROM limit_permit WHERE limit_key = ?1 AND job_id = ?2 AND until = ?3
