-- params: ?1 now
SELECT id FROM job WHERE next_run_at <= ?1
