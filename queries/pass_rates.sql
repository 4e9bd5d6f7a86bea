-- pass_rates: per (scenario, version), the two pass rates the SPRT/Wilson CI post asks
-- for, since each answers a different question:
--
--   per_protocol_rate   passes / trials that count (infrastructure, pre-validation and
--                       empty runs excluded; a timeout after a tool call counts as a
--                       failure): how the agent does when it actually runs
--   itt_rate            intent-to-treat: passes / every trial with a known result,
--                       excluded ones included as failures: how reliable the whole
--                       pipeline is
--   n_<class>           trials per error class, so exclusions are visible, never silent
--   n_unknown           trials with no outcome (not labelled, no assay.trial.outcome)
CREATE OR REPLACE VIEW pass_rates AS
SELECT
    scenario,
    version,
    count(*) AS n_trials,
    count(*) FILTER (WHERE counted AND passed IS NOT NULL) AS per_protocol_n,
    count(*) FILTER (WHERE counted AND passed) AS per_protocol_passes,
    count(*) FILTER (WHERE counted AND passed) / nullif(count(*) FILTER (WHERE counted AND passed IS NOT NULL), 0)
        AS per_protocol_rate,
    count(*) FILTER (WHERE passed IS NOT NULL OR NOT counted) AS itt_n,
    -- an excluded trial is a failure here even when it recorded outcome=pass (an
    -- infrastructure error or a broken test after which the check happened to pass):
    -- only counted trials can pass
    count(*) FILTER (WHERE counted AND passed) AS itt_passes,
    count(*) FILTER (WHERE counted AND passed) / nullif(count(*) FILTER (WHERE passed IS NOT NULL OR NOT counted), 0)
        AS itt_rate,
    count(*) FILTER (WHERE error_class = 'infrastructure') AS n_infrastructure,
    count(*) FILTER (WHERE error_class = 'pre-validation') AS n_pre_validation,
    count(*) FILTER (WHERE error_class = 'empty-run') AS n_empty_run,
    count(*) FILTER (WHERE error_class = 'timeout') AS n_timeout,
    count(*) FILTER (WHERE passed IS NULL AND counted) AS n_unknown
FROM trials
GROUP BY scenario, version;
