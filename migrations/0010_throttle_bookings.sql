-- Flow control (design §20): a throttled limit key books the starts of the jobs it refuses. Each
-- refused job is given the next free start, one interval after the last one booked, and comes
-- back for it; so the refused jobs of a busy key come back spread over their turns instead of
-- all at the next start (where all but one would be refused again). A booking is a hint, not a
-- permit: the start is still granted by the throttle when the job asks again.
ALTER TABLE limit_state ADD COLUMN booked_us INTEGER NOT NULL DEFAULT 0;  -- µs: just past the last booked start
