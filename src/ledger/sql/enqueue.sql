-- A job submitted through the API: recorded PENDING before it is sent. Nothing is written when the
-- id exists or the dedupe key is active (the caller then reads the existing job). A keyed job takes
-- its key's next sequence number (design §3b.1): a batch of these runs in order in one transaction, so
-- request order is seq order. With ?13 (strict mode, a limit key with a concurrency, due now:
-- design §20.12) a job no open job of its ordering key comes before is recorded parked, due at ?13
-- (the recheck; an unkeyed one due now: it takes the lock-mode path, whose claim reads no
-- wake-up's mark, and no delivery of a key's other jobs needs stopping), and joins its limit key's
-- line instead of the queue; the rest wait for their key's chain as ever. A debounced job keeps
-- ?14, the latest newer submissions may put its start off to (replace.sql, design §22.4). A job
-- submitted to be replaced (?15 = 1) is never claimed ahead by a strict chain (claim_next.sql).
-- ?16, ?17: the W3C trace context it was submitted with (design §27), or NULL. ?18: the batch
-- it is a member of (design §25), or NULL.
-- params: ?1 id, ?2 type, ?3 ordering_key, ?4 dedupe_key, ?5 payload, ?6 max_attempts, ?7 now, ?8 next_run_at, ?9 priority, ?10 limit_key, ?11 deadline_at, ?12 timeout_seconds, ?13 parks_until, ?14 debounce_until, ?15 replaceable, ?16 traceparent, ?17 tracestate, ?18 batch_id
INSERT INTO job (id, type, status, ordering_key, dedupe_key, payload, attempts, max_attempts,
                 deferrals, next_run_at, created_at, updated_at, priority, seq, limit_key, deadline_at, timeout_seconds,
                 parked, debounce_until, replaceable, traceparent, tracestate, batch_id)
SELECT ?1, ?2, 'PENDING', ?3, ?4, ?5, 0, ?6, 0, CASE WHEN adm.park = 1 AND ?3 IS NOT NULL THEN ?13 ELSE ?8 END, ?7, ?7, ?9,
       CASE WHEN ?3 IS NOT NULL THEN (SELECT coalesce(max(seq), 0) + 1 FROM job WHERE ordering_key = ?3 AND seq IS NOT NULL) END,
       ?10, ?11, ?12, adm.park, ?14, ?15, ?16, ?17, ?18
FROM (SELECT CASE WHEN ?13 IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM job WHERE ordering_key = ?3 AND seq IS NOT NULL AND passed_at IS NULL)
             THEN 1 ELSE 0 END AS park) AS adm
WHERE true
ON CONFLICT DO NOTHING
RETURNING *
