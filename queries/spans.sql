-- spans: one row per span, the lake schema (the Arrow schema the lake's files are written
-- with: a flat row per span, hex ids, INT64 nanosecond times) plus derived columns.
--
-- `lake_spans` is bound by the engine to the lake's live Parquet files (union_by_name, so
-- files written by older schema versions still read). Duplicate (trace_id, span_id) rows
-- are removed where they arise — the collector drops retransmitted spans and `compact`
-- removes any that slipped through — so this view does not pay for a dedupe scan.
CREATE OR REPLACE VIEW spans AS
SELECT
    * EXCLUDE (dt, span_row, span_file),
    start_time_unix_nano + duration_ns AS end_time_unix_nano
FROM lake_spans;
