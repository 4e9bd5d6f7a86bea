-- fingerprints: one behavioural vector per trial (the AgentAssay paper's behavioural
-- fingerprint: how the agent worked, not only whether it passed), the input of
-- the Hotelling T² shift test. Every feature is a DOUBLE; a trial with no steps gets 0s.
-- The per-tool frequencies u are in fingerprint_tools (they depend on the vocabulary of
-- the trials being compared).
--
-- Work steps and structure. One agent run gives the same LLM calls and tool calls under
-- every instrumentation, but not the same container steps: a LangGraph run is 4 steps under
-- otel-assay and LangSmith, 5 under OpenLLMetry and 6 under OpenInference (which adds an
-- agent step per node visit). Counts and shares measured over all steps would therefore
-- tell the instrumentation apart, not the behaviour, and a baseline recorded by one would
-- block a candidate recorded by another. So the counts and shares below are taken over the
-- work steps, the LLM calls, tool calls and the answer (llm, tool and respond steps), which every
-- instrumentation records alike; the structural columns (marked S) depend on how the
-- instrumentation nests its spans, and the gate does not test them.
--
--   n_steps            L: number of work steps (LLM calls + tool calls). The trial's length.
--   max_depth        S D: deepest step nesting (steps; 1 = top level, 0 = no steps).
--                      Delegation or nested agents show up here.
--   n_branches       S B: root-to-leaf paths of the step tree = steps with no child
--                      step (count). Fan-out and parallel calls raise it.
--   output_tokens      ℓ: output tokens of the final response (the respond step; 0 when
--                      there is none). Verbosity of the answer.
--   output_complexity  κ in [0, 1]: Flesch-Kincaid grade of the final response text / 18
--                      (a graduate-level ceiling), clamped; syllables are estimated as
--                      vowel groups; 0 without text. Style drift of the answer.
--   frac_llm, frac_tool, frac_respond
--                      w: share of the work steps of each kind (LLM calls that asked for
--                      tools or were not the answer, tool calls, the answer).
--   frac_agent, frac_reason, frac_workflow, frac_other
--                    S share of all steps (container steps included) of each other kind.
--   error_flag         e: 1 if any step ended in error, else 0.
--   recovery_rate      ρ in [0, 1]: share of failed work steps after which a later step of
--                      the same kind (and tool) succeeded; 1 when no work step failed. Whether
--                      the agent recovers or gives up. (A failed container step, such as the
--                      graph run a tool error ended, is never redone, and only some
--                      instrumentations record one.)
--   total_tokens       input + output tokens of all LLM calls (tokens). Spend. The sum of
--                      what the calls report, as trials' input_tokens and output_tokens sum
--                      it: calls that report output tokens but no input tokens count their
--                      output (a NULL input sum made the total 0); NULL when the LLM calls
--                      report no usage at all, 0 without LLM calls.
--   tokens_per_step    total_tokens / n_steps (tokens per work step). Spend per unit of work;
--                      NULL like total_tokens.
--   cost_usd           C: cost of all LLM calls (USD); NULL when a call could not be priced.
--   cost_per_step      c̄ = cost_usd / n_steps (USD per work step); NULL like cost_usd.
--   latency_s          wall-clock duration of the trial, first span start to last span end
--                      (seconds).
CREATE OR REPLACE VIEW fingerprints AS
WITH
-- recovery: a failed work step is recovered when a later step of the same kind (and tool)
-- succeeded. Errors are rare, so the last success per (trial, kind, tool) is aggregated
-- once and joined to the error steps only, rather than windowed over every step.
last_ok AS (
    SELECT trace_id, CASE WHEN llm_call THEN 'llm' ELSE step_kind END AS retry_kind, tool_name, max(seq) AS last_ok_seq
    FROM steps WHERE status = 'ok' AND step_kind IN ('llm', 'tool', 'respond')
    GROUP BY ALL
),
recovered AS (
    SELECT e.trace_id, count(*) AS n_recovered
    FROM steps e
    JOIN last_ok o
      ON o.trace_id = e.trace_id AND o.retry_kind = CASE WHEN e.llm_call THEN 'llm' ELSE e.step_kind END
     AND o.tool_name IS NOT DISTINCT FROM e.tool_name AND o.last_ok_seq > e.seq
    WHERE e.status = 'error' AND e.step_kind IN ('llm', 'tool', 'respond')
    GROUP BY e.trace_id
),
shape AS (
    SELECT m.trace_id,
        count(*) AS n_all,
        count(*) FILTER (WHERE m.step_kind IN ('llm', 'tool', 'respond')) AS n_steps,
        max(m.depth) AS max_depth,
        -- a step's step_parent_id is always another step of its trial, and a trial's step
        -- span ids are unique (steps.sql rule 1): the steps with no child are the steps
        -- minus the distinct parents, with no join of every step against its parents
        count(*) - count(DISTINCT m.step_parent_id) AS n_branches,
        count(*) FILTER (WHERE m.step_kind = 'llm') AS n_llm,
        count(*) FILTER (WHERE m.step_kind = 'tool') AS n_tool,
        count(*) FILTER (WHERE m.step_kind = 'agent') AS n_agent,
        count(*) FILTER (WHERE m.step_kind = 'reason') AS n_reason,
        count(*) FILTER (WHERE m.step_kind = 'respond') AS n_respond,
        count(*) FILTER (WHERE m.step_kind = 'workflow') AS n_workflow,
        count(*) FILTER (WHERE m.step_kind = 'other') AS n_other,
        count(*) FILTER (WHERE m.status = 'error') AS n_error_steps,
        count(*) FILTER (WHERE m.status = 'error' AND m.step_kind IN ('llm', 'tool', 'respond')) AS n_work_errors,
        arg_max(m.output_tokens, m.seq) FILTER (WHERE m.step_kind = 'respond') AS final_output_tokens,
        arg_max(m.output_text, m.seq) FILTER (WHERE m.step_kind = 'respond') AS final_text
    FROM steps m
    GROUP BY m.trace_id
),
readability AS (
    SELECT trace_id, n_words, n_sentences, greatest(n_syllables, n_words) AS n_syllables
    FROM (SELECT trace_id,
              len(regexp_extract_all(final_text, '[A-Za-z0-9]+')) AS n_words,
              greatest(1, len(regexp_extract_all(final_text, '[.!?]+'))) AS n_sentences,
              len(regexp_extract_all(lower(final_text), '[aeiouy]+')) AS n_syllables
          FROM shape WHERE final_text IS NOT NULL)
)
SELECT
    t.trace_id, t.scenario, t.version, t.run_id,
    coalesce(h.n_steps, 0)::DOUBLE AS n_steps,
    coalesce(h.max_depth, 0)::DOUBLE AS max_depth,
    coalesce(h.n_branches, 0)::DOUBLE AS n_branches,
    coalesce(h.final_output_tokens, 0)::DOUBLE AS output_tokens,
    CAST(CASE WHEN r.n_words > 0 THEN
        greatest(0.0, least(1.0, (0.39 * r.n_words / r.n_sentences + 11.8 * r.n_syllables / r.n_words - 15.59) / 18.0))
    ELSE 0 END AS DOUBLE) AS output_complexity,
    coalesce(h.n_llm / h.n_steps, 0.0) AS frac_llm,
    coalesce(h.n_tool / h.n_steps, 0.0) AS frac_tool,
    coalesce(h.n_agent / h.n_all, 0.0) AS frac_agent,
    coalesce(h.n_reason / h.n_all, 0.0) AS frac_reason,
    coalesce(h.n_respond / h.n_steps, 0.0) AS frac_respond,
    coalesce(h.n_workflow / h.n_all, 0.0) AS frac_workflow,
    coalesce(h.n_other / h.n_all, 0.0) AS frac_other,
    CAST(CASE WHEN coalesce(h.n_error_steps, 0) > 0 THEN 1 ELSE 0 END AS DOUBLE) AS error_flag,
    CAST(CASE WHEN coalesce(h.n_work_errors, 0) = 0 THEN 1 ELSE coalesce(rc.n_recovered, 0) / h.n_work_errors END AS DOUBLE)
        AS recovery_rate,
    coalesce(t.input_tokens + t.output_tokens, t.input_tokens, t.output_tokens)::DOUBLE AS total_tokens,
    CASE WHEN h.n_steps > 0 THEN coalesce(t.input_tokens + t.output_tokens, t.input_tokens, t.output_tokens) / h.n_steps
         ELSE 0.0 END AS tokens_per_step,
    t.cost_usd::DOUBLE AS cost_usd,
    CASE WHEN h.n_steps > 0 THEN t.cost_usd / h.n_steps ELSE t.cost_usd END AS cost_per_step,
    t.duration_ns / 1e9 AS latency_s
FROM trials t
LEFT JOIN shape h USING (trace_id)
LEFT JOIN readability r USING (trace_id)
LEFT JOIN recovered rc USING (trace_id);
