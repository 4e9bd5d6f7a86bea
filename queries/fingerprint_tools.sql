-- fingerprint_tools: the AgentAssay paper's tool-usage vector u of a fingerprint, in long
-- form (without it, swapping the preferred tool is invisible to the shift test), one row per
-- (trial, tool used). `calls` is the number of tool steps with that tool; `freq` is
-- calls / n_steps (all steps of the trial, so u sums with the step-kind fractions to the
-- trial's shape). A tool of the vocabulary that a trial never called is absent here and
-- 0 in the wide matrix (otel_assay.analyze.fingerprint builds it over a tool vocabulary,
-- in SQL, one `sum(...) FILTER` column per tool).
CREATE OR REPLACE VIEW fingerprint_tools AS
WITH sizes AS (SELECT trace_id, count(*) AS n_steps FROM steps GROUP BY trace_id)
SELECT s.trace_id, s.tool_name, count(*) AS calls, count(*) / any_value(z.n_steps) AS freq
FROM steps s JOIN sizes z USING (trace_id)
WHERE s.step_kind = 'tool' AND s.tool_name IS NOT NULL
GROUP BY s.trace_id, s.tool_name;
