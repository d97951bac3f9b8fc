-- Strict mode (design §3b): a per-key sequence number decides each key's order, and an operator's
-- skip lets a key blocked by a DEAD head (ON_DEAD = "block") move on. Existing rows keep working:
-- both columns start NULL (a keyed PENDING row recorded before strict mode gets its seq when
-- strict mode first parks it).
ALTER TABLE job ADD COLUMN seq INTEGER;          -- per ordering_key, from 1, in record order; NULL when unkeyed
ALTER TABLE job ADD COLUMN skipped_at INTEGER;   -- ms; an operator let the key move past this DEAD job

-- One job per (key, seq): the order is a total order.
CREATE UNIQUE INDEX job_key_seq ON job (ordering_key, seq) WHERE seq IS NOT NULL;
-- A key's unfinished jobs in order: the run rule reads only these, never a key's DONE history.
CREATE INDEX job_key_open ON job (ordering_key, seq) WHERE seq IS NOT NULL AND status <> 'DONE';
