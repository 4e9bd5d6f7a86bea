-- fingerprint_tools: the AgentAssay paper's tool-usage vector u of a fingerprint, in long
-- form (without it, swapping the preferred tool is invisible to the shift test), one row per
-- (trial, tool used). `calls` is the number of tool steps with that tool; `freq` is
-- calls / the trial's work steps (LLM calls, tool calls and the answer: the fingerprints
-- view's n_steps, so u sums with frac_llm and frac_respond to 1). Work steps, not all
-- steps: instrumentations nest one run in different numbers of container steps, and a share
-- of all steps would differ between them for the same calls. A tool of the vocabulary that
-- a trial never called is absent here and 0 in the wide matrix
-- (otel_assay.analyze.fingerprint builds it over a tool vocabulary, in SQL, one
-- `sum(...) FILTER` column per tool).
CREATE OR REPLACE VIEW fingerprint_tools AS
WITH sizes AS (SELECT trace_id, count(*) AS n_steps FROM steps
               WHERE step_kind IN ('llm', 'tool', 'respond') GROUP BY trace_id)
SELECT s.trace_id, s.tool_name, count(*) AS calls, count(*) / any_value(z.n_steps) AS freq
FROM steps s JOIN sizes z USING (trace_id)
WHERE s.step_kind = 'tool' AND s.tool_name IS NOT NULL
GROUP BY s.trace_id, s.tool_name;
