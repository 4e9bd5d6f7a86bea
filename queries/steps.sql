-- steps: one row per agent step (DESIGN §5), built from span_kinds.
--
--   trace_id, span_id         the step's span
--   step_parent_id            nearest ancestor span that is itself a step (structural
--                             spans and dropped duplicates are skipped); NULL at the top
--   depth                     1 for a top-level step, parent's depth + 1 below it
--   seq                       1, 2, ... order of the step in its trial (start time, then
--                             depth, then span id)
--   step_kind                 llm / tool / agent / reason / respond / workflow / other
--   llm_call                  true for llm and respond steps: the only steps whose tokens
--                             and cost count (aggregating spans repeat their children's
--                             tokens, §7.3 rule 5)
--   source_convention         otel_assay / otel_genai / openinference / openllmetry /
--                             langsmith / autogen_native / crewai_native
--   agent_name                the step's own agent name, else the nearest agent step's
--   tool_args                 canonical JSON (sorted keys, no whitespace; Python-repr
--                             strings and Traceloop wrappers unwrapped: canonical_json())
--   cost_usd, cost_source     from a cost attribute ('attribute') or model_prices
--                             ('price_table'); NULL when neither knows the model
--   status                    'ok' or 'error'
--
-- Three rules need the whole trial, which is why this is one query:
-- (1) a span id that occurs twice (retransmission, broken emitter) is kept once, the
--     earliest, so that parent links form a forest and the recursion terminates;
-- (2) a step emitted by two instrumentations counts once (§7.3 rule 2): two steps of one
--     trial, of the same kind (and tool name), from different conventions, whose time
--     windows overlap or that share a tool call id, are one step; the highest-priority
--     convention wins (otel_assay > otel_genai = native framework spans > openinference >
--     openllmetry > langsmith) and takes fields it lacks (arguments, tokens, ...) from the
--     one it replaces when that pairing is unambiguous;
-- (3) parentage walks down from the roots once over a table materialised in memory
--     (`nodes`), never re-reading Parquet per tree level (storage.md §6). Roots are spans
--     without a parent, or whose parent is not in the lake (orphans). Spans whose parent
--     chain loops never meet a root; they are treated as top level.
--
-- respond is derived (instrumentation.md §7.2): the last llm step of a trial becomes
-- respond when it did not ask for tools (known from its output messages or finish
-- reasons; when the span does not say, when no tool step follows it).
CREATE OR REPLACE VIEW steps AS
WITH RECURSIVE
kinds AS MATERIALIZED (
    SELECT *,
        CASE source_convention
            WHEN 'otel_assay' THEN 1 WHEN 'otel_genai' THEN 2 WHEN 'autogen_native' THEN 2
            WHEN 'crewai_native' THEN 2 WHEN 'openinference' THEN 3 WHEN 'openllmetry' THEN 4
            WHEN 'langsmith' THEN 5 ELSE 6 END AS priority
    FROM span_kinds
    QUALIFY row_number() OVER (PARTITION BY trace_id, span_id
                               ORDER BY start_time_unix_nano, duration_ns DESC, name, parent_span_id) = 1
),
-- only trials with steps from two or more conventions can hold duplicates
mixed AS (
    SELECT trace_id FROM kinds WHERE step_kind <> 'structural'
    GROUP BY trace_id HAVING min(priority) <> max(priority)
),
candidates AS (
    SELECT k.*,
        k.start_time_unix_nano + k.duration_ns AS end_ns,
        CASE WHEN k.step_kind = 'tool' THEN lower(coalesce(k.tool_name, '')) ELSE '' END AS identity
    FROM kinds k SEMI JOIN mixed m ON k.trace_id = m.trace_id
    WHERE k.step_kind <> 'structural'
),
-- clusters of time-overlapping steps of one kind and identity (a sweep over start times)
swept AS (
    SELECT *,
        max(end_ns) OVER (PARTITION BY trace_id, step_kind, identity ORDER BY start_time_unix_nano, span_id
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM candidates
),
clustered AS (
    SELECT *,
        sum(CASE WHEN prev_end IS NULL OR start_time_unix_nano > prev_end THEN 1 ELSE 0 END)
            OVER (PARTITION BY trace_id, step_kind, identity ORDER BY start_time_unix_nano, span_id
                  ROWS UNBOUNDED PRECEDING) AS cluster
    FROM swept
),
judged AS (
    SELECT *,
        priority > min(priority) OVER w
            -- two calls with different call ids are different calls, whatever their timing
            AND NOT (tool_call_id IS NOT NULL AND count(DISTINCT tool_call_id) OVER w > 1) AS duplicate
    FROM clustered
    WINDOW w AS (PARTITION BY trace_id, step_kind, identity, cluster)
),
merged AS (
    SELECT trace_id, span_id, duplicate,
        -- fields a kept step lacks, from the duplicates it replaces (only when it replaces
        -- them alone, so a field is never taken from a different call)
        CASE WHEN n_kept = 1 THEN arg_min(tool_call_id, priority) FILTER (WHERE tool_call_id IS NOT NULL) OVER c END AS m_tool_call_id,
        CASE WHEN n_kept = 1 THEN arg_min(tool_args_raw, priority) FILTER (WHERE tool_args_raw IS NOT NULL) OVER c END AS m_tool_args_raw,
        CASE WHEN n_kept = 1 THEN arg_min(output_text, priority) FILTER (WHERE output_text IS NOT NULL) OVER c END AS m_output_text,
        CASE WHEN n_kept = 1 THEN arg_min(model, priority) FILTER (WHERE model IS NOT NULL) OVER c END AS m_model,
        CASE WHEN n_kept = 1 THEN arg_min(response_model, priority) FILTER (WHERE response_model IS NOT NULL) OVER c END AS m_response_model,
        CASE WHEN n_kept = 1 THEN arg_min(provider, priority) FILTER (WHERE provider IS NOT NULL) OVER c END AS m_provider,
        CASE WHEN n_kept = 1 THEN arg_min(input_tokens, priority) FILTER (WHERE input_tokens IS NOT NULL) OVER c END AS m_input_tokens,
        CASE WHEN n_kept = 1 THEN arg_min(output_tokens, priority) FILTER (WHERE output_tokens IS NOT NULL) OVER c END AS m_output_tokens,
        CASE WHEN n_kept = 1 THEN arg_min(cost_attr_usd, priority) FILTER (WHERE cost_attr_usd IS NOT NULL) OVER c END AS m_cost_attr_usd,
        CASE WHEN n_kept = 1 THEN arg_min(requested_tools, priority) FILTER (WHERE requested_tools IS NOT NULL) OVER c END AS m_requested_tools,
        CASE WHEN n_kept = 1 THEN arg_min(agent_name, priority) FILTER (WHERE agent_name IS NOT NULL) OVER c END AS m_agent_name
    FROM (SELECT *, count(*) FILTER (WHERE NOT duplicate) OVER c AS n_kept FROM judged
          WINDOW c AS (PARTITION BY trace_id, step_kind, identity, cluster))
    WINDOW c AS (PARTITION BY trace_id, step_kind, identity, cluster)
),
-- the tree: every span once, with whether it is a step
nodes AS MATERIALIZED (
    SELECT k.trace_id, k.span_id, k.parent_span_id,
        k.step_kind <> 'structural' AND NOT coalesce(d.duplicate, false) AS is_step,
        CASE WHEN k.step_kind = 'agent' THEN coalesce(k.agent_name, d.m_agent_name) END AS agent_here
    FROM kinds k LEFT JOIN merged d ON d.trace_id = k.trace_id AND d.span_id = k.span_id
),
roots AS (
    SELECT n.* FROM nodes n
    WHERE n.parent_span_id IS NULL OR n.parent_span_id = n.span_id
       OR NOT EXISTS (SELECT 1 FROM nodes p WHERE p.trace_id = n.trace_id AND p.span_id = n.parent_span_id)
),
walk(trace_id, span_id, is_step, agent_here, step_parent_id, step_ancestors, inherited_agent) AS (
    SELECT trace_id, span_id, is_step, agent_here, NULL::VARCHAR, 0, NULL::VARCHAR FROM roots
    UNION ALL
    SELECT c.trace_id, c.span_id, c.is_step, c.agent_here,
        CASE WHEN p.is_step THEN p.span_id ELSE p.step_parent_id END,
        p.step_ancestors + CASE WHEN p.is_step THEN 1 ELSE 0 END,
        coalesce(p.agent_here, p.inherited_agent)
    FROM walk p
    JOIN nodes c ON c.trace_id = p.trace_id AND c.parent_span_id = p.span_id AND c.span_id <> c.parent_span_id
),
placed AS (
    SELECT k.*,
        w.step_parent_id,
        coalesce(w.step_ancestors, 0) + 1 AS depth,
        w.inherited_agent,
        d.m_tool_call_id, d.m_tool_args_raw, d.m_output_text, d.m_model, d.m_response_model, d.m_provider,
        d.m_input_tokens, d.m_output_tokens, d.m_cost_attr_usd, d.m_requested_tools, d.m_agent_name
    FROM kinds k
    LEFT JOIN walk w ON w.trace_id = k.trace_id AND w.span_id = k.span_id
    LEFT JOIN merged d ON d.trace_id = k.trace_id AND d.span_id = k.span_id
    WHERE k.step_kind <> 'structural' AND NOT coalesce(d.duplicate, false)
),
filled AS (
    SELECT trace_id, span_id, step_parent_id, depth, step_kind, source_convention, scope_name, name,
        coalesce(agent_name, m_agent_name, inherited_agent) AS agent_name,
        tool_name,
        coalesce(tool_call_id, m_tool_call_id) AS tool_call_id,
        coalesce(tool_args_raw, m_tool_args_raw) AS tool_args_raw,
        coalesce(model, m_model) AS model,
        coalesce(response_model, m_response_model) AS response_model,
        coalesce(provider, m_provider) AS provider,
        coalesce(input_tokens, m_input_tokens) AS input_tokens,
        coalesce(output_tokens, m_output_tokens) AS output_tokens,
        coalesce(cost_attr_usd, m_cost_attr_usd) AS cost_attr_usd,
        coalesce(requested_tools, m_requested_tools) AS requested_tools,
        status, error_type, start_time_unix_nano, duration_ns, finish_reasons,
        coalesce(output_text, m_output_text) AS output_text,
        row_number() OVER (PARTITION BY trace_id ORDER BY start_time_unix_nano, depth, span_id) AS seq
    FROM placed
),
ordered AS (
    SELECT *,
        max(seq) FILTER (WHERE step_kind = 'llm') OVER t AS last_llm_seq,
        max(seq) FILTER (WHERE step_kind = 'tool') OVER t AS last_tool_seq
    FROM filled
    WINDOW t AS (PARTITION BY trace_id)
),
-- canonical_json() is a Python function (JSON with sorted keys cannot be written in SQL);
-- it runs once per distinct argument string, not once per step
canonical_args AS (
    SELECT raw, canonical_json(raw) AS tool_args
    FROM (SELECT DISTINCT tool_args_raw AS raw FROM filled WHERE tool_args_raw IS NOT NULL)
),
-- one price per distinct model, so the prefix match runs over a handful of rows
priced_models AS (
    SELECT m.priced_model, m.provider,
        arg_max(p.input_usd_per_mtok, (p.provider IS NOT NULL, length(p.model))) AS input_usd_per_mtok,
        arg_max(p.output_usd_per_mtok, (p.provider IS NOT NULL, length(p.model))) AS output_usd_per_mtok
    FROM (SELECT DISTINCT lower(coalesce(response_model, model)) AS priced_model, provider
          FROM filled WHERE step_kind = 'llm') m
    JOIN model_prices p
      ON (m.priced_model = lower(p.model) OR starts_with(m.priced_model, lower(p.model) || '-'))
     AND (p.provider IS NULL OR lower(p.provider) = m.provider)
    GROUP BY ALL
)
SELECT
    o.trace_id,
    o.span_id,
    o.step_parent_id,
    o.depth,
    o.seq,
    CASE WHEN o.step_kind = 'llm' AND o.seq = o.last_llm_seq
              AND coalesce(NOT o.requested_tools, o.last_tool_seq IS NULL OR o.last_tool_seq < o.seq)
         THEN 'respond' ELSE o.step_kind END AS step_kind,
    o.step_kind = 'llm' AS llm_call,
    o.source_convention,
    o.scope_name,
    o.name,
    o.agent_name,
    o.tool_name,
    o.tool_call_id,
    ca.tool_args,
    o.model,
    o.response_model,
    o.provider,
    o.input_tokens,
    o.output_tokens,
    coalesce(o.cost_attr_usd,
             o.input_tokens / 1e6 * pm.input_usd_per_mtok + o.output_tokens / 1e6 * pm.output_usd_per_mtok) AS cost_usd,
    CASE WHEN o.cost_attr_usd IS NOT NULL THEN 'attribute'
         WHEN pm.input_usd_per_mtok IS NOT NULL AND o.input_tokens IS NOT NULL AND o.output_tokens IS NOT NULL
         THEN 'price_table' END AS cost_source,
    o.status,
    o.error_type,
    o.start_time_unix_nano,
    o.duration_ns,
    o.finish_reasons,
    o.requested_tools,
    o.output_text
FROM ordered o
LEFT JOIN priced_models pm
  ON o.step_kind = 'llm' AND pm.priced_model = lower(coalesce(o.response_model, o.model))
 AND pm.provider IS NOT DISTINCT FROM o.provider
LEFT JOIN canonical_args ca ON ca.raw = o.tool_args_raw;
