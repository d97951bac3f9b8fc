-- Cost per job (design §15): `job_done_finished` (DONE rows by finished_at) duplicated `job_finished`
-- (every finished row by finished_at): every job that became DONE wrote an entry in both. The
-- purge reads DONE rows by finished_at through `job_finished` now (a DEAD row in the range is
-- read and passed over, never written), one index entry less for every DONE job.
DROP INDEX job_done_finished;
