-- Snoozes have an end: a job counts the snoozes it took (a snooze spends no attempt), and the
-- consumer makes the one past `MAX_SNOOZES` DEAD. A column of the row alone: no index holds it,
-- so counting a snooze writes no more rows than the snooze did before.
ALTER TABLE job ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0 CHECK (snoozes >= 0);
