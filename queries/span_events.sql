-- span_events: one row per span event (exceptions, gen_ai.* events), joined to spans
-- by (trace_id, span_id). Partitioned like the span it belongs to.
CREATE OR REPLACE VIEW span_events AS
SELECT * EXCLUDE (dt) FROM lake_span_events;
