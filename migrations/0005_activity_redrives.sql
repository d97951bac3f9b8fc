-- The charts' backlog counts a redriven job as open again from its redrive (its created_at may be
-- long before the hour shown): recent runs and redrives are read together through one index.
DROP INDEX job_event_at;
CREATE INDEX job_event_at ON job_event (at) WHERE kind IN ('attempt', 'redrive');
