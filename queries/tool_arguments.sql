-- tool_arguments: every recorded tool call with its canonical arguments, the input of
-- boundary coverage (which schema boundaries the recorded arguments hit).
CREATE OR REPLACE VIEW tool_arguments AS
SELECT trace_id, span_id, seq, tool_name, tool_args, status
FROM steps
WHERE step_kind = 'tool' AND tool_name IS NOT NULL;
