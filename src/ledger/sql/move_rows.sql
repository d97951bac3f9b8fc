-- Moving a D1 ledger to shards (design §19.7): how many rows each table a move copies that is not
-- a job's own holds (flow control's and pauses' rows, schedules: the open work's, a few per key),
-- to compare a source with its shards. A job's own rows (history, waits, waiters, batch members)
-- are compared job by job, a page at a time (move_page.sql): counting them here would read the
-- whole history in one statement.
-- params: none
SELECT
  (SELECT count(*) FROM limit_state) AS limit_state,
  (SELECT count(*) FROM limit_permit) AS limit_permit,
  (SELECT count(*) FROM limit_wait) AS limit_wait,
  (SELECT count(*) FROM key_pause) AS key_pause,
  (SELECT count(*) FROM schedule) AS schedule
