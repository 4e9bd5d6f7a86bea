-- models_used: one row per (trial, model, provider) of the trial's LLM calls, with the
-- number of calls; the "models tested" of model coverage.
CREATE OR REPLACE VIEW models_used AS
SELECT trace_id, model, provider, count(*) AS calls
FROM steps
WHERE llm_call AND model IS NOT NULL
GROUP BY ALL;
