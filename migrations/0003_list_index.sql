-- Lists of every status (GET /jobs without ?status) page newest first through this index
-- instead of sorting the table.
CREATE INDEX job_created ON job (created_at DESC, id DESC);
