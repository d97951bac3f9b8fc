-- A PENDING job put off again (its key's lock is held): its next_run_at moves to ?2 only once it
-- has fallen more than ?4 behind, so a job polling a held key is written once per ?4, not once
-- per poll, and maintenance (which re-sends jobs overdue by more than twice that) never takes
-- its live message for lost. ?1 id, ?2 next_run_at, ?3 now, ?4 slack (ms)
-- params: ?1 id, ?2 next_run_at, ?3 now, ?4 slack
UPDATE job SET next_run_at = ?2, updated_at = ?3
WHERE id = ?1 AND status = 'PENDING' AND next_run_at < ?2 - ?4
