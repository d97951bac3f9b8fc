-- Trace context carried with a job (design §27): the W3C traceparent and tracestate of the request
-- or message that submitted it (NULL: none came), so each attempt's work, however much later it
-- runs, joins the trace that caused it. Columns only: no row is written more for them.
ALTER TABLE job ADD COLUMN traceparent TEXT;
ALTER TABLE job ADD COLUMN tracestate TEXT;
