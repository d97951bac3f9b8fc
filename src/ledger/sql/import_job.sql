-- Moving a D1 ledger to shards: one job's whole row into its shard, replacing a copy made before
-- (a move run twice is the same move). Every column of the schema, by name.
-- params: ?1 id, ?2 type, ?3 status, ?4 ordering_key, ?5 dedupe_key, ?6 payload, ?7 attempts, ?8 max_attempts, ?9 deferrals, ?10 lease_owner, ?11 lease_until, ?12 next_run_at, ?13 last_error, ?14 created_at, ?15 updated_at, ?16 finished_at, ?17 seq, ?18 skipped_at, ?19 priority, ?20 result, ?21 passed_at, ?22 started_at, ?23 ran_by, ?24 http_status, ?25 snoozes, ?26 limit_key, ?27 deadline_at, ?28 timeout_seconds, ?29 parked, ?30 cancel_requested_at, ?31 debounce_until, ?32 superseded_at, ?33 replaceable, ?34 traceparent, ?35 tracestate, ?36 batch_id
INSERT OR REPLACE INTO job (id, type, status, ordering_key, dedupe_key, payload, attempts, max_attempts,
                            deferrals, lease_owner, lease_until, next_run_at, last_error, created_at,
                            updated_at, finished_at, seq, skipped_at, priority, result, passed_at,
                            started_at, ran_by, http_status, snoozes, limit_key, deadline_at, timeout_seconds, parked,
                            cancel_requested_at, debounce_until, superseded_at, replaceable, traceparent, tracestate,
                            batch_id)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21,
        ?22, ?23, ?24, ?25, ?26, ?27, ?28, coalesce(?29, 0), ?30, ?31, ?32, coalesce(?33, 0),
        ?34, ?35, ?36)
