-- span_links: one row per span link (for example a trial resumed from another trace).
CREATE OR REPLACE VIEW span_links AS
SELECT * EXCLUDE (dt) FROM lake_span_links;
