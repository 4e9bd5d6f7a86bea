-- steps: one row per agent step (an LLM call, a tool call, an agent run, ...) whatever
-- instrumentation emitted it, built from span_kinds.
--
--   trace_id, span_id         the step's span
--   step_parent_id            nearest ancestor span that is itself a step (structural
--                             spans and dropped duplicates are skipped, except that a
--                             duplicate dropped for its direct child stands for that
--                             child: the pair is one step); NULL at the top
--   depth                     1 for a top-level step, parent's depth + 1 below it
--   seq                       1, 2, ... order of the step in its trial (start time, then
--                             depth; ties broken by a hash of the span id)
--   step_kind                 llm / tool / agent / reason / respond / workflow / other
--   llm_call                  true for llm steps, and the respond step derived from one:
--                             the only steps whose tokens and cost count (aggregating
--                             spans, such as OpenInference's smolagents AGENT span or
--                             the Agents SDK's task and turn spans, repeat their
--                             children's tokens)
--   source_convention         otel_assay / otel_genai / openinference / openllmetry /
--                             langsmith / autogen_native / crewai_native / vercel_ai
--   agent_name                the step's own agent name, else the nearest agent step's
--   tool_args                 canonical JSON (sorted keys, no whitespace; Python-repr
--                             strings and Traceloop wrappers unwrapped: canonical_json())
--   cost_usd, cost_source     from a cost attribute ('attribute') or model_prices
--                             ('price_table'); NULL when neither knows the model
--   status                    'ok' or 'error'
--
-- Four rules need the whole trial, which is why this is one query:
-- (1) a span id that occurs twice (retransmission, broken emitter) is kept once, the
--     earliest, so that parent links form a forest and the recursion terminates;
-- (2) a step emitted by two instrumentations counts once (AutoGen's native spans next to
--     OpenInference's for AutoGen, LangSmith next to a LangChain instrumentor): two steps
--     of one trial, of the same kind (and tool name), from different conventions, whose
--     time windows overlap or that share a tool call id, are one step; the highest-priority
--     convention wins (otel_assay > otel_genai = native framework spans (the Vercel AI SDK's
--     too) > openinference >
--     openllmetry > langsmith) and takes fields it lacks (arguments, tokens, ...) from the
--     one it replaces when that pairing is unambiguous;
-- (3) parentage walks down from the roots once over a table materialised in memory
--     (`nodes`), never re-reading Parquet per tree level (a recursive CTE straight over
--     Parquet rescans the files at every level, several times slower on a large lake).
--     Roots are spans without a parent, or whose parent is not in the lake (orphans).
--     Spans whose parent chain loops never meet a root; they are treated as top level.
-- (4) a model call one convention reports twice, nested (OpenLit's LangChain span around
--     its OpenAI span), counts once: an LLM step whose only child step is an LLM step of
--     the same convention and model (or one of them names none), itself without child
--     steps, is that call; the inner, provider-level span is kept in the outer one's place
--     (the outer one's tokens are estimated or repeat the inner one's).
--
-- Cost: the lake is read once (`base`); the tree, the order and the dedupe work on narrow
-- rows (integer keys) and the wide columns join back once at the end, by row id.
--
-- steps_between(lo, hi) gives the same rows for the trials whose trace id is in [lo, hi)
-- (NULL: unbounded); on a large lake Engine.materialize builds `steps` in such parts, so
-- that the in-memory work above stays bounded.
--
-- A trial whose steps a step file already holds (written by `otel-assay compact`, checked
-- by the engine: analyze/stepfiles.py) is not computed here: `steps` reads those rows
-- from stored_steps instead, and steps_between leaves the trial's spans out.
--
-- respond is derived, since few instrumentations mark the final answer: the last llm
-- step of a trial becomes respond when it did not ask for tools (known from its output
-- messages or finish reasons; when the span does not say, when no tool step follows it)
-- and did not fail (a failed call answered nothing). A trial whose own spans mark a respond step
-- (otel_assay.step(kind="respond")) keeps that one instead.
CREATE OR REPLACE MACRO steps_between(lo, hi) AS TABLE
WITH RECURSIVE
base AS MATERIALIZED (
    SELECT *,
        span_row AS rid,
        -- integer join keys: hashing the hex ids once makes every join below several times
        -- cheaper than joining on strings; a false match needs two 64-bit hashes to collide
        hash(trace_id) AS tk, hash(span_id) AS sk,
        CASE WHEN parent_span_id IS NOT NULL THEN hash(parent_span_id) END AS pk,
        -- OpenLit's LangGraph instrumentor reports each node run as `invoke_agent <node>`
        -- next to its LangChain instrumentor's span for the same run, which holds the
        -- node's model calls (LangGraph's has no children): two instrumentations of one
        -- convention, so rule (2) takes them as two, ranking LangGraph's below
        CASE WHEN scope_name = 'openlit.instrumentation.langgraph' THEN 3 ELSE
        CASE source_convention
            WHEN 'otel_assay' THEN 1 WHEN 'otel_genai' THEN 2 WHEN 'autogen_native' THEN 2
            WHEN 'crewai_native' THEN 2 WHEN 'vercel_ai' THEN 2 WHEN 'openinference' THEN 4 WHEN 'openllmetry' THEN 5
            WHEN 'langsmith' THEN 6 ELSE 7 END END AS priority
    FROM span_kinds
    WHERE (lo IS NULL OR trace_id >= lo) AND (hi IS NULL OR trace_id < hi)
      -- not the trials whose steps a step file holds (stored_steps.sql; bound by the engine)
      AND steps_from_spans(span_file, trace_id)
),
-- rule (1): only the (normally no) span ids that occur twice go through a window
repeated AS (SELECT tk, sk FROM base GROUP BY tk, sk HAVING count(*) > 1),
dropped_copies AS (
    SELECT rid FROM (SELECT * FROM base SEMI JOIN repeated USING (tk, sk))
    QUALIFY row_number() OVER (PARTITION BY tk, sk
                               ORDER BY start_time_unix_nano, duration_ns DESC, name, parent_span_id) > 1
),
-- Traceloop runs a LangGraph subgraph as `execute_task <node>` with two children, the
-- subgraph's `invoke_agent <graph>` span and an `execute_task <graph>` span that holds
-- the subgraph's nodes (and so its LLM and tool calls): the agent span has no children.
-- The task span is placed under its sibling agent of the same name whose run encloses it,
-- so that the subgraph's steps are the agent's children, as every other dialect has them
tl_adopted AS (
    SELECT t.rid, arg_min(a.sk, a.start_time_unix_nano) AS agent_sk
    FROM (SELECT * FROM base WHERE tl_task_name IS NOT NULL AND pk IS NOT NULL) t
    JOIN (SELECT * FROM base WHERE step_kind = 'agent' AND source_convention = 'openllmetry' AND pk IS NOT NULL) a
      ON a.tk = t.tk AND a.pk = t.pk AND a.agent_name = t.tl_task_name AND a.sk <> t.sk
     AND a.start_time_unix_nano <= t.start_time_unix_nano
     AND a.start_time_unix_nano + a.duration_ns >= t.start_time_unix_nano + t.duration_ns
    GROUP BY t.rid
),
core AS MATERIALIZED (
    SELECT rid, tk, sk, coalesce(ad.agent_sk, pk) AS pk, span_id, start_time_unix_nano, duration_ns, step_kind, priority, tool_call_id,
        CASE WHEN step_kind = 'tool' THEN lower(coalesce(tool_name, '')) ELSE '' END AS identity,
        CASE WHEN step_kind = 'agent' THEN agent_name END AS agent_here
    FROM base ANTI JOIN dropped_copies USING (rid) LEFT JOIN tl_adopted ad USING (rid)
),
-- rule (2): only trials with steps from two or more conventions can hold duplicates
mixed AS (
    SELECT tk FROM core WHERE step_kind <> 'structural'
    GROUP BY tk HAVING min(priority) <> max(priority)
),
-- clusters of time-overlapping steps of one kind and identity (a sweep over start times)
swept AS (
    SELECT c.*,
        max(start_time_unix_nano + duration_ns) OVER (
            PARTITION BY tk, step_kind, identity ORDER BY start_time_unix_nano, sk
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM core c SEMI JOIN mixed m ON c.tk = m.tk
    WHERE c.step_kind <> 'structural'
),
clustered AS (
    SELECT *,
        sum(CASE WHEN prev_end IS NULL OR start_time_unix_nano > prev_end THEN 1 ELSE 0 END)
            OVER (PARTITION BY tk, step_kind, identity ORDER BY start_time_unix_nano, sk ROWS UNBOUNDED PRECEDING)
            AS cluster
    FROM swept
),
judged AS (
    SELECT * EXCLUDE (kept_ids),
        priority > min_priority
            -- a call whose id none of the kept calls has is another call, whatever its
            -- timing. Only the kept convention's ids decide: the other convention having
            -- two ids in the cluster (LangSmith records call ids, OpenLLMetry does not) only
            -- means two parallel calls, each of which the kept convention also recorded
            AND NOT (tool_call_id IS NOT NULL AND len(kept_ids) > 0 AND NOT list_contains(kept_ids, tool_call_id))
            AS duplicate
    FROM (
        SELECT *,
            list_filter(list(CASE WHEN priority = min_priority THEN tool_call_id END) OVER w, lambda i: i IS NOT NULL)
                AS kept_ids
        FROM (SELECT *, min(priority) OVER w AS min_priority FROM clustered
              WINDOW w AS (PARTITION BY tk, step_kind, identity, cluster))
        WINDOW w AS (PARTITION BY tk, step_kind, identity, cluster)
    )
),
-- a kept step takes the fields it lacks from the duplicates it replaces, only when it
-- replaces them alone (so a field never comes from a different call)
merged AS (
    SELECT j.rid, j.duplicate,
        CASE WHEN n_kept = 1 AND NOT j.duplicate THEN j.cluster_key END AS cluster_key
    FROM (SELECT *, count(*) FILTER (WHERE NOT duplicate) OVER (PARTITION BY tk, step_kind, identity, cluster) AS n_kept,
                 (tk, step_kind, identity, cluster) AS cluster_key
          FROM judged) j
),
donors AS (
    SELECT (j.tk, j.step_kind, j.identity, j.cluster) AS cluster_key,
        arg_min(b.tool_call_id, j.priority) FILTER (WHERE b.tool_call_id IS NOT NULL) AS tool_call_id,
        arg_min(b.tool_args_raw, j.priority) FILTER (WHERE b.tool_args_raw IS NOT NULL) AS tool_args_raw,
        arg_min(b.output_text, j.priority) FILTER (WHERE b.output_text IS NOT NULL) AS output_text,
        arg_min(b.model, j.priority) FILTER (WHERE b.model IS NOT NULL) AS model,
        arg_min(b.response_model, j.priority) FILTER (WHERE b.response_model IS NOT NULL) AS response_model,
        arg_min(b.provider, j.priority) FILTER (WHERE b.provider IS NOT NULL) AS provider,
        arg_min(b.input_tokens, j.priority) FILTER (WHERE b.input_tokens IS NOT NULL) AS input_tokens,
        arg_min(b.output_tokens, j.priority) FILTER (WHERE b.output_tokens IS NOT NULL) AS output_tokens,
        arg_min(b.cost_attr_usd, j.priority) FILTER (WHERE b.cost_attr_usd IS NOT NULL) AS cost_attr_usd,
        arg_min(b.requested_tools, j.priority) FILTER (WHERE b.requested_tools IS NOT NULL) AS requested_tools,
        arg_min(b.agent_name, j.priority) FILTER (WHERE b.agent_name IS NOT NULL) AS agent_name
    FROM judged j JOIN base b ON b.rid = j.rid
    GROUP BY 1
),
-- the steps of rule (2)'s clusters that hold a duplicate from another convention
cross_judged AS (
    SELECT rid FROM judged
    QUALIFY bool_or(duplicate) OVER (PARTITION BY tk, step_kind, identity, cluster)
),
-- rule (4): one convention reporting one model call twice, nested (OpenLit's LangChain
-- span around its OpenAI span; OpenInference's LangChain and OpenAI instrumentors): an
-- LLM span whose only child step is an LLM span of the same convention and model (or one
-- of them names none), which itself has no child step, is that call. The inner span is
-- kept: it is the provider's report (the wrapper's tokens are estimated, or repeat it).
-- Pairs that rule (2) already judged are left to it
llm_nest AS (
    SELECT w.rid AS w_rid, w.tk, w.sk AS w_sk, p.rid AS p_rid, p.sk AS p_sk, p.span_id AS p_span_id,
           p.agent_here AS p_agent
    FROM (SELECT * FROM core WHERE step_kind = 'llm' AND pk IS NOT NULL) p
    JOIN (SELECT * FROM core WHERE step_kind = 'llm') w ON w.tk = p.tk AND w.sk = p.pk AND w.priority = p.priority
),
child_steps AS (
    SELECT c.tk, c.pk, count(*) AS n
    FROM core c
    SEMI JOIN (SELECT tk, w_sk AS sk FROM llm_nest UNION ALL SELECT tk, p_sk FROM llm_nest) x
      ON x.tk = c.tk AND x.sk = c.pk
    WHERE c.step_kind <> 'structural'
    GROUP BY c.tk, c.pk
),
wrapped AS (
    SELECT n.w_rid AS d_rid, n.p_rid AS k_rid, n.p_span_id AS k_span_id, n.p_agent AS k_agent
    FROM llm_nest n
    JOIN base bw ON bw.rid = n.w_rid
    JOIN base bp ON bp.rid = n.p_rid
    JOIN child_steps cw ON cw.tk = n.tk AND cw.pk = n.w_sk AND cw.n = 1
    ANTI JOIN child_steps cp ON cp.tk = n.tk AND cp.pk = n.p_sk
    WHERE bw.source_convention = bp.source_convention
      AND (bw.model IS NULL OR bp.model IS NULL OR lower(bw.model) = lower(bp.model)
           -- a dated snapshot of the other's model (gpt-4o-2024-08-06)
           OR starts_with(lower(bp.model), lower(bw.model) || '-') OR starts_with(lower(bw.model), lower(bp.model) || '-'))
      AND n.w_rid NOT IN (SELECT rid FROM cross_judged) AND n.p_rid NOT IN (SELECT rid FROM cross_judged)
),
-- a dropped duplicate whose only replacement is its direct child (OpenInference's AGENT
-- or TOOL span around AutoGen's own, and the wrapped model calls of rule 4): the pair is
-- one step, so in the tree the outer span stands for the kept one. The kept step sits
-- where the outer span is, and the outer span's other children (an LLM call under
-- OpenInference's AGENT span) are children of the kept step rather than of whatever step
-- is above the pair
aliases AS (
    SELECT jd.rid AS d_rid, mk.rid AS k_rid, ck.span_id AS k_span_id, ck.agent_here AS k_agent
    FROM judged jd
    JOIN merged mk ON mk.cluster_key = (jd.tk, jd.step_kind, jd.identity, jd.cluster)
    JOIN core ck ON ck.rid = mk.rid
    WHERE jd.duplicate AND ck.pk = jd.sk
    UNION ALL
    SELECT * FROM wrapped
),
-- the tree: every span once, with whether it is a step (out_rid: the step an aliased
-- duplicate stands for)
nodes AS MATERIALIZED (
    SELECT c.rid, c.tk, c.sk, c.pk,
        coalesce(a.k_span_id, c.span_id) AS span_id,
        CASE WHEN a.d_rid IS NOT NULL THEN true
             -- placed through the duplicate it replaces
             WHEN ak.k_rid IS NOT NULL THEN false
             ELSE c.step_kind <> 'structural' AND NOT coalesce(m.duplicate, false) END AS is_step,
        CASE WHEN a.d_rid IS NOT NULL THEN coalesce(a.k_agent, c.agent_here)
             ELSE coalesce(c.agent_here, CASE WHEN c.step_kind = 'agent' THEN d.agent_name END) END AS agent_here,
        a.k_rid AS out_rid
    FROM core c
    LEFT JOIN merged m ON m.rid = c.rid
    LEFT JOIN donors d ON d.cluster_key = m.cluster_key
    LEFT JOIN aliases a ON a.d_rid = c.rid
    LEFT JOIN aliases ak ON ak.k_rid = c.rid
),
roots AS (
    SELECT n.* FROM nodes n WHERE n.pk IS NULL OR n.pk = n.sk
    UNION ALL
    SELECT n.* FROM nodes n ANTI JOIN nodes p ON p.tk = n.tk AND p.sk = n.pk WHERE n.pk IS NOT NULL AND n.pk <> n.sk
),
walk(rid, tk, sk, span_id, is_step, agent_here, step_parent_id, step_ancestors, inherited_agent) AS (
    SELECT rid, tk, sk, span_id, is_step, agent_here, NULL::VARCHAR, 0, NULL::VARCHAR FROM roots
    UNION ALL
    SELECT c.rid, c.tk, c.sk, c.span_id, c.is_step, c.agent_here,
        CASE WHEN p.is_step THEN p.span_id ELSE p.step_parent_id END,
        p.step_ancestors + CASE WHEN p.is_step THEN 1 ELSE 0 END,
        coalesce(p.agent_here, p.inherited_agent)
    FROM walk p
    JOIN nodes c ON c.tk = p.tk AND c.pk = p.sk AND c.sk <> c.pk
),
-- the steps, narrow: placement in the tree and order in the trial
placed AS (
    SELECT c.rid, n.tk, c.sk, c.step_kind, c.start_time_unix_nano,
        w.step_parent_id, coalesce(w.step_ancestors, 0) + 1 AS depth, w.inherited_agent
    FROM nodes n
    JOIN core c ON c.rid = coalesce(n.out_rid, n.rid)
    LEFT JOIN walk w ON w.rid = n.rid
    WHERE n.is_step
),
-- sorted on integers only (the hashed span id breaks ties): sorting strings here would
-- cost more than the whole tree walk
ordered AS (
    SELECT rid, tk, step_kind,
        row_number() OVER (PARTITION BY tk ORDER BY start_time_unix_nano, depth, sk) AS seq
    FROM placed
),
trial_ends AS (
    SELECT tk,
        max(seq) FILTER (WHERE step_kind = 'llm') AS last_llm_seq,
        max(seq) FILTER (WHERE step_kind = 'tool') AS last_tool_seq,
        bool_or(step_kind = 'respond') AS has_respond
    FROM ordered GROUP BY tk
),
-- the wide columns, joined back once
filled AS (
    SELECT o.seq, p.depth, p.step_parent_id, e.last_llm_seq, e.last_tool_seq, e.has_respond,
        b.trace_id, b.span_id, b.step_kind, b.source_convention, b.scope_name, b.name,
        coalesce(b.agent_name, d.agent_name, p.inherited_agent) AS agent_name,
        b.tool_name,
        coalesce(b.tool_call_id, d.tool_call_id) AS tool_call_id,
        coalesce(b.tool_args_raw, d.tool_args_raw) AS tool_args_raw,
        coalesce(b.model, d.model) AS model,
        coalesce(b.response_model, d.response_model) AS response_model,
        coalesce(b.provider, d.provider) AS provider,
        coalesce(b.input_tokens, d.input_tokens) AS input_tokens,
        coalesce(b.output_tokens, d.output_tokens) AS output_tokens,
        coalesce(b.cost_attr_usd, d.cost_attr_usd) AS cost_attr_usd,
        coalesce(b.requested_tools, d.requested_tools) AS requested_tools,
        b.status, b.error_type, b.start_time_unix_nano, b.duration_ns, b.finish_reasons,
        coalesce(b.output_text, d.output_text) AS output_text
    FROM ordered o
    JOIN placed p ON p.rid = o.rid
    JOIN base b ON b.rid = o.rid
    JOIN trial_ends e ON e.tk = o.tk
    LEFT JOIN merged m ON m.rid = o.rid
    LEFT JOIN donors d ON d.cluster_key = m.cluster_key
),
-- canonical_json() is a Python function (JSON with sorted keys cannot be written in SQL);
-- it runs once per distinct argument string, not once per step
canonical_args AS (
    SELECT raw, canonical_json(raw) AS tool_args
    FROM (SELECT tool_args_raw AS raw FROM base WHERE step_kind = 'tool' AND tool_args_raw IS NOT NULL
          UNION
          SELECT tool_args_raw FROM donors WHERE tool_args_raw IS NOT NULL)
),
-- one price per distinct model, so the prefix match runs over a handful of rows
priced_models AS (
    SELECT priced_model, provider, price.input_usd_per_mtok, price.output_usd_per_mtok
    FROM (SELECT priced_model, provider, model_price(priced_model, provider) AS price
          FROM (SELECT lower(coalesce(response_model, model)) AS priced_model, provider FROM base WHERE step_kind = 'llm'
          UNION
          -- the model a kept step took from the duplicate it replaced
          SELECT lower(coalesce(b.response_model, d.response_model, b.model, d.model)), coalesce(b.provider, d.provider)
          FROM merged m JOIN base b ON b.rid = m.rid JOIN donors d ON d.cluster_key = m.cluster_key
          WHERE b.step_kind = 'llm'))
)
SELECT
    o.trace_id,
    o.span_id,
    o.step_parent_id,
    o.depth,
    o.seq,
    CASE WHEN o.step_kind = 'llm' AND o.seq = o.last_llm_seq AND o.status = 'ok' AND NOT o.has_respond
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
FROM filled o
LEFT JOIN priced_models pm
  ON o.step_kind = 'llm' AND pm.priced_model = lower(coalesce(o.response_model, o.model))
 AND pm.provider IS NOT DISTINCT FROM o.provider
LEFT JOIN canonical_args ca ON ca.raw = o.tool_args_raw;

CREATE OR REPLACE VIEW steps AS
SELECT * FROM steps_between(NULL, NULL)
UNION ALL
SELECT * FROM stored_steps;
