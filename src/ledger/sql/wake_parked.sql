-- A job taken out of its limit key's line becomes due at its wake-up's delivery (design §20.10),
-- in the same transaction as the claim that follows: strict mode parks a limited job not due
-- (PARKED_RECHECK_SECONDS on), so that the deliveries of its key's other jobs claim and ask
-- nothing while it waits. Only while it is parked (a claim clears `parked`): a copy of the
-- wake-up delivered after the job ran again never cuts a backoff or a snooze short.
-- params: ?1 id, ?2 now
UPDATE job SET next_run_at = ?2, updated_at = ?2, parked = 0
WHERE id = ?1 AND status = 'PENDING' AND parked = 1 AND next_run_at > ?2
RETURNING id
