-- stability_summary: stability across the trials of each (scenario, version), what the
-- stability gate reads: one run can look stable by luck, so the gate judges many.
--
--   score          mean of the trials' weakest_score
--   weakest_score  minimum weakest_score: the single worst trial's weakest dimension
--   variance       population variance of weakest_score: how much trials swing
--   mean_<sub-score>   mean of each sub-score, to see which dimension moved
--   drift_flags    sub-scores whose mean is strictly below the default floor 0.5
CREATE OR REPLACE VIEW stability_summary AS
WITH agg AS (
    SELECT scenario, version,
        count(*) AS n_trials,
        avg(weakest_score) AS score,
        min(weakest_score) AS weakest_score,
        var_pop(weakest_score) AS variance,
        avg(tool_usage_stability) AS mean_tool_usage_stability,
        avg(response_consistency) AS mean_response_consistency,
        avg(redundancy) AS mean_redundancy,
        avg(cost_per_progress) AS mean_cost_per_progress
    FROM stability
    GROUP BY scenario, version
)
SELECT *,
    list_filter(['tool_usage_stability', 'response_consistency', 'redundancy', 'cost_per_progress'],
                lambda name, i: [mean_tool_usage_stability, mean_response_consistency, mean_redundancy,
                              mean_cost_per_progress][i] < 0.5) AS drift_flags
FROM agg;
