-- Moves the purge of status ?1 on to ?2: no job of it finished before ?2 is left to delete.
-- params: ?1 status, ?2 until
INSERT INTO purge_cursor (name, until) VALUES (?1, ?2)
ON CONFLICT (name) DO UPDATE SET until = max(until, excluded.until)
