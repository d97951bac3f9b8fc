-- A job submitted through the API: recorded PENDING before it is sent. Nothing is written when the
-- id exists or the dedupe key is active (the caller then reads the existing job).
-- ?1 id, ?2 type, ?3 ordering_key, ?4 dedupe_key, ?5 payload, ?6 max_attempts, ?7 now, ?8 next_run_at
INSERT INTO job (id, type, status, ordering_key, dedupe_key, payload, attempts, max_attempts,
                 deferrals, next_run_at, created_at, updated_at)
VALUES (?1, ?2, 'PENDING', ?3, ?4, ?5, 0, ?6, 0, ?8, ?7, ?7)
ON CONFLICT DO NOTHING
RETURNING *
