-- trials: one row per trace (a trial is one trace: the capture API opens one root span per
-- trial, so the trace id is the trial id), steps rolled up; except
-- traces made only of the gate's own verdict spans (scope otel_assay.gate) or of set-up:
-- agents built (create_agent spans) or prompt templates formatted (LangSmith prompt runs)
-- outside any run. What the trial's spans and labels say of it (its identity, outcome,
-- score, timing) comes from trial_facts; this view adds what its steps say.
--
--   trace_id, run_id, scenario, version, trial_index
--       from the assay.* attributes (on every span of a trial; the earliest span that has
--       one, normally the trial root, wins); version falls back to the resource's
--       service.version. A label (trial_labels) overrides them. Traces without assay.*
--       and without a label are still trials, with these columns NULL.
--   models          distinct models of the trial's LLM calls, sorted
--   outcome         'pass' / 'fail' / NULL (unknown), score (assay.trial.score); a boolean
--                   assay.trial.outcome (stored as 'true' / 'false') reads as pass / fail
--   error_class     the error classes of the SPRT/Wilson CI post, which keep a broken
--                   harness from counting against the agent: the explicit assay.error.class
--                   (normalised: infrastructure, pre-validation, empty-run, timeout; the
--                   adapters also write exception, max-steps (a failure) and interrupted
--                   (Ctrl-C, a graph paused for a human: counted, outcome unknown)), else
--                   'timeout' when a root span failed with a timeout, else 'empty-run'
--                   when the trial has no LLM call and no tool step
--   counted         whether the trial counts in per-protocol pass rates: infrastructure,
--                   pre-validation and empty runs do not; a timeout counts (as a failure)
--                   only if a tool call finished before it (before the trial root ended),
--                   otherwise it is excluded as a no-op. A timed-out agent thread cannot
--                   be killed and may record tool calls later; those are not work done
--                   within the trial, and `otel-assay run` decided without them
--   passed          the success indicator the rates use: outcome = 'pass', except that a
--                   counted timeout is a failure; NULL when the outcome is unknown
--   started_at (UTC, microseconds), start_time_unix_nano, duration_ns
--                   first span start to last span end
--   n_spans, n_steps, n_llm (LLM calls: llm + respond steps), n_tool, n_errors (steps
--   with status error); n_spans counts stored rows: a span stored twice (the same trace_id
--   and span_id in two files) counts twice there, once in the step counts. Counting it once
--   made this view a fifth slower, for a number no check reads
--   input_tokens, output_tokens   summed over LLM calls only (0 without LLM calls;
--                   NULL when the LLM calls report no usage)
--   cost_usd        summed over LLM calls; NULL if any LLM call could not be priced, so
--                   an unknown model never looks free
--   labelled        whether a label (trial_labels) applies to the trial
--   n_unknown_ops   spans whose gen_ai.operation.name the step mapping does not know
--                   (known_operation() in span_kinds.sql): they are no steps, so a trial
--                   whose work is all such spans is classed empty-run. Not 0 means the
--                   trial's counts may miss work: the gate says so in a note
CREATE OR REPLACE VIEW trials AS
WITH step_facts AS (
    SELECT
        trace_id,
        count(*) AS n_steps,
        count(*) FILTER (WHERE llm_call) AS n_llm,
        count(*) FILTER (WHERE step_kind = 'tool') AS n_tool,
        min(start_time_unix_nano + duration_ns) FILTER (WHERE step_kind = 'tool') AS first_tool_end_unix_nano,
        count(*) FILTER (WHERE status = 'error') AS n_errors,
        sum(input_tokens) FILTER (WHERE llm_call) AS input_tokens,
        sum(output_tokens) FILTER (WHERE llm_call) AS output_tokens,
        -- summed as decimals: a sum of doubles depends on the order DuckDB's threads combine
        -- their partial sums in, and the report's cost changed in its last digits between
        -- runs. A cost beyond any real one (a hostile attribute: 1e30, inf) would not fit a
        -- decimal; such trials keep the plain sum. Only costs below the bound reach the
        -- decimal sum: DuckDB computes both branches, and a few costs of 5e19 (each one fits)
        -- overflowed it, an error that failed every query over trials
        CASE WHEN max(abs(cost_usd)) FILTER (WHERE llm_call) < 1e9
             THEN sum(TRY_CAST(CASE WHEN abs(cost_usd) < 1e9 THEN cost_usd END AS DECIMAL(38, 18)))
                      FILTER (WHERE llm_call)::DOUBLE
             ELSE sum(cost_usd) FILTER (WHERE llm_call) END AS cost_usd,
        count(*) FILTER (WHERE llm_call AND cost_usd IS NULL) AS n_unpriced
    FROM steps
    GROUP BY trace_id
),
-- apart from step_facts: an ordered DISTINCT list inside that aggregate cost five times
-- as much as all its other aggregates together
trial_models AS (
    SELECT trace_id, list(model ORDER BY model) AS models
    FROM (SELECT DISTINCT trace_id, model FROM steps WHERE llm_call AND model IS NOT NULL)
    GROUP BY trace_id
),
joined AS (
    SELECT
        f.trace_id,
        f.run_id,
        f.scenario,
        f.version,
        f.trial_index,
        coalesce(tm.models, []::VARCHAR[]) AS models,
        f.outcome,
        f.score,
        f.explicit_class,
        f.root_timed_out,
        st.first_tool_end_unix_nano <= coalesce(f.root_end_time_unix_nano, st.first_tool_end_unix_nano)
            AS tool_before_end,
        make_timestamp(f.start_time_unix_nano // 1000) AS started_at,  -- microseconds: what Python datetimes hold
        f.start_time_unix_nano,
        f.end_time_unix_nano - f.start_time_unix_nano AS duration_ns,
        f.n_spans,
        coalesce(st.n_steps, 0) AS n_steps,
        coalesce(st.n_llm, 0) AS n_llm,
        coalesce(st.n_tool, 0) AS n_tool,
        coalesce(st.n_errors, 0) AS n_errors,
        f.n_unknown_ops,
        CAST(CASE WHEN coalesce(st.n_llm, 0) = 0 THEN 0 ELSE st.input_tokens END AS BIGINT) AS input_tokens,
        CAST(CASE WHEN coalesce(st.n_llm, 0) = 0 THEN 0 ELSE st.output_tokens END AS BIGINT) AS output_tokens,
        CASE WHEN coalesce(st.n_llm, 0) = 0 THEN 0.0 WHEN st.n_unpriced > 0 THEN NULL ELSE st.cost_usd END AS cost_usd,
        f.labelled
    FROM trial_facts f
    LEFT JOIN step_facts st USING (trace_id)
    LEFT JOIN trial_models tm USING (trace_id)
),
classified AS (
    SELECT *,
        coalesce(explicit_class,
                 CASE WHEN root_timed_out THEN 'timeout'
                      WHEN n_llm = 0 AND n_tool = 0 THEN 'empty-run' END) AS error_class
    FROM joined
)
SELECT
    trace_id, run_id, scenario, version, trial_index, models, outcome, score, error_class,
    CASE WHEN error_class IN ('infrastructure', 'pre-validation', 'empty-run') THEN false
         WHEN error_class = 'timeout' THEN coalesce(tool_before_end, false)
         ELSE true END AS counted,
    CASE WHEN error_class = 'timeout' AND tool_before_end THEN false
         WHEN outcome = 'pass' THEN true
         WHEN outcome = 'fail' THEN false END AS passed,
    started_at, start_time_unix_nano, duration_ns,
    n_spans, n_steps, n_llm, n_tool, n_errors, input_tokens, output_tokens, cost_usd, labelled, n_unknown_ops
FROM classified;
