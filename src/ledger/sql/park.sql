-- Strict mode: a delivered keyed job is recorded PENDING with its key's next sequence number
-- (first-recorded order), unless the ledger already has it. A keyed PENDING row recorded before
-- strict mode (no seq yet) gets one. Nothing else about an existing row changes: the ledger row is
-- the truth. A new job whose dedupe key is active in another job is not inserted. A row the
-- upsert would leave alone (the common case: a job submitted through the API, already sequenced)
-- is found by one primary-key probe and nothing else is read.
-- params: ?1 id, ?2 type, ?3 ordering_key, ?4 dedupe_key, ?5 payload, ?6 max_attempts, ?7 now, ?8 priority, ?9 limit_key, ?10 deadline_at, ?11 timeout_seconds
INSERT INTO job (id, type, status, ordering_key, dedupe_key, payload, attempts, max_attempts,
                 deferrals, next_run_at, created_at, updated_at, priority, seq, limit_key, deadline_at, timeout_seconds)
SELECT ?1, ?2, 'PENDING', ?3, ?4, ?5, 0, ?6, 0, ?7, ?7, ?7, ?8,
       (SELECT coalesce(max(seq), 0) + 1 FROM job WHERE ordering_key = ?3 AND seq IS NOT NULL), ?9, ?10, ?11
WHERE NOT EXISTS (
    SELECT 1 FROM job AS had
    WHERE had.id = ?1 AND NOT (had.seq IS NULL AND had.ordering_key IS NOT NULL AND had.status = 'PENDING'))
  AND (?4 IS NULL OR NOT EXISTS (
    SELECT 1 FROM job WHERE dedupe_key = ?4 AND finished_at IS NULL AND superseded_at IS NULL AND id <> ?1))
ON CONFLICT (id) DO UPDATE SET
  seq = (SELECT coalesce(max(k.seq), 0) + 1 FROM job AS k WHERE k.ordering_key = job.ordering_key AND k.seq IS NOT NULL),
  updated_at = excluded.updated_at
WHERE job.seq IS NULL AND job.ordering_key IS NOT NULL AND job.status = 'PENDING'
RETURNING *
