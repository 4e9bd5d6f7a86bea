-- stored_steps: the steps that step files hold, in the columns of `steps`.
--
-- A step file (analyze/stepfiles.py) is one lake file's steps, computed when
-- `otel-assay compact` wrote the file. The engine binds lake_step_files to the step files
-- it checked: undamaged (their own checksum), computed from that very span file, by the
-- current definition of `steps`.
-- `steps` reads these rows instead of computing them again (10M spans: about 35 s).
--
-- Left out: the trials in _split_trials, which also have spans in another file the
-- engine reads (a trace across a dt= boundary, spans that came after compaction). Their
-- steps need every span, so steps_between computes them from the spans.
--
-- Costs are priced again when the engine's price table (--prices) differs from the one a
-- step file was written with (stored_costs_repriced(), bound by the engine: pricing
-- costs a scan of every stored step per query); a cost from an attribute stays as it was.
CREATE OR REPLACE VIEW stored_steps AS
WITH kept AS (
    SELECT * FROM lake_step_files ANTI JOIN _split_trials USING (trace_id)
),
priced_models AS (
    SELECT priced_model, provider, model_price(priced_model, provider) AS price
    FROM (SELECT DISTINCT lower(coalesce(response_model, model)) AS priced_model, provider FROM kept WHERE llm_call)
)
SELECT * FROM kept WHERE NOT stored_costs_repriced()
UNION ALL
SELECT s.* REPLACE (
    CASE WHEN s.cost_source = 'attribute' THEN s.cost_usd
         ELSE s.input_tokens / 1e6 * pm.price.input_usd_per_mtok + s.output_tokens / 1e6 * pm.price.output_usd_per_mtok
    END AS cost_usd,
    CASE WHEN s.cost_source = 'attribute' THEN 'attribute'
         WHEN pm.price.input_usd_per_mtok IS NOT NULL AND s.input_tokens IS NOT NULL AND s.output_tokens IS NOT NULL
         THEN 'price_table' END AS cost_source)
FROM kept s
LEFT JOIN priced_models pm
  ON s.llm_call AND pm.priced_model = lower(coalesce(s.response_model, s.model))
 AND pm.provider IS NOT DISTINCT FROM s.provider
WHERE stored_costs_repriced();
