-- Where the purge of status ?1 starts: the finished_at before which none of its jobs is left (0
-- when it has never run).
-- params: ?1 status
SELECT coalesce((SELECT until FROM purge_cursor WHERE name = ?1), 0) AS until
