-- span_kinds: one row per span, every instrumentation dialect (GenAI semconv of every
-- vintage, OpenInference, OpenLLMetry/Traceloop, LangSmith, AutoGen and CrewAI native, the
-- Vercel AI SDK)
-- mapped onto the canonical step fields, so that every analyzer reads one shape whatever
-- emitted the trace. No dedupe and no tree here: `steps` builds on this.
--
-- step_kind is one of llm / tool / agent / reason / workflow / other, respond (only where
-- our own span says so: otel_assay.step(kind="respond"), smolagents' final_answer), or 'structural' for
-- spans that are not agent steps (LangGraph plumbing, Traceloop tasks, OpenInference and
-- LangSmith chains below the root, AutoGen runtime messaging, our own trial root, plain
-- spans with no GenAI markers). Structural spans stay in the tree so parentage can skip
-- them. `respond` is not decided per span: steps.sql derives it from the whole trial.
--
-- Detection order (a span may speak several dialects; the first here decides, the
-- standard one first): a standard gen_ai.operation.name decides; else openinference.span.kind; else
-- traceloop.span.kind / llm.request.type; else langsmith.span.kind; else the Vercel AI
-- SDK's ai.operationId; else an LLM-looking
-- legacy span (gen_ai.system with a model); else structural. Dual-emitting
-- instrumentations (OpenInference with OPENINFERENCE_ENABLE_GENAI_SEMCONV,
-- Traceloop >= 0.5) agree between their dialects. Two exceptions come before the
-- operation name, where a library writes one that says less than its own marker:
-- Traceloop's workflow span and LangSmith's prompt runs (operation `chat`).
--
-- Values come from typed columns first (the lake promotes gen_ai.* keys of the current
-- convention), then from the map for every older or foreign key. Lookups sit inside
-- CASE branches so a span only pays for the keys of its own kind.
--
-- span_row is the span's position in the lake files (file and row number, bound by the
-- engine): a row id that is the same on every scan, which `steps` joins on. That is why
-- this view reads lake_spans, the files as bound, rather than the `spans` view.
-- span_file is the file alone (an index into the engine's file list): steps.sql leaves
-- out the files whose steps a step file holds by it, so DuckDB does not read them.
--
-- Operation names are read by a deliberate list, not by a pattern: the GenAI conventions'
-- names, and the names other libraries write in their place. LiteLLM writes its call type
-- (`acompletion` for every async call, `atext_completion`, `aresponses`, ...): read as
-- `other`, each such call vanished and the trial became an empty run. A name that
-- known_operation() does not know is unknown: the span is no step (it is decided by the
-- span's other markers, if any), and `trials` counts such spans (n_unknown_ops), so that a
-- trial emptied by a name otel-assay cannot read says so.
--
-- The Vercel AI SDK (JavaScript, `experimental_telemetry`) names each span's operation in
-- ai.operationId: `ai.generateText` (also streamText, generateObject, streamObject, embed,
-- embedMany) is the call as a whole, a tool loop of several model calls; its
-- `ai.generateText.doGenerate` / `.doStream` children are the model calls (with gen_ai.*
-- keys too), `.doEmbed` an embedding, and `ai.toolCall` a tool the loop ran. Its finish
-- reason for a turn that asked for tools is `tool-calls`, with a hyphen. Its provider ids
-- name the API after a dot (`openai.chat`, `openai.responses`): the provider is the part
-- before it, as the GenAI conventions name providers.

-- a model call that produces a turn (an llm step, which carries tokens and cost)
CREATE OR REPLACE MACRO generation_operations() AS [
    'chat', 'text_completion', 'generate_content',
    -- LiteLLM's call types (its sync `completion` is written as chat)
    'completion', 'acompletion', 'atext_completion', 'agenerate_content', 'responses', 'aresponses',
    'anthropic_messages', 'aanthropic_messages'];

-- a step of kind `other`: agent set-up, retrieval, memory, and model calls that produce no
-- turn (embeddings, reranking, moderation, media: LiteLLM's names for them too)
CREATE OR REPLACE MACRO other_operations() AS [
    'create_agent', 'embeddings', 'retrieval', 'create_memory_store', 'search_memory', 'create_memory',
    'update_memory', 'upsert_memory', 'delete_memory', 'delete_memory_store',
    'embedding', 'aembedding', 'rerank', 'arerank', 'moderation', 'amoderation', 'image_generation',
    'aimage_generation', 'transcription', 'atranscription', 'speech', 'aspeech'];

-- every operation name the mapping knows: the two lists, the names of the other kinds,
-- and names whose span is no step (LangSmith's chain and parser run types, which its
-- run kind decides; CrewAI's and OpenLLMetry's task spans). Tested as a subquery: DuckDB
-- compares a list of constants one by one, and a subquery is one hash lookup (`trials`
-- tests every span: a quarter of the time on the 1M-span bench lake)
CREATE OR REPLACE MACRO known_operation(op) AS op IN (SELECT unnest(
    generation_operations() || other_operations()
    || ['execute_tool', 'invoke_agent', 'invoke_workflow', 'plan', 'chain', 'parser', 'execute_task']));

CREATE OR REPLACE VIEW span_kinds AS
WITH marked AS (
    SELECT
        s.*,
        coalesce(s.op, s.attributes['gen_ai.operation.name']) AS op_name,
        s.attributes['openinference.span.kind'] AS oi_kind,
        coalesce(s.attributes['traceloop.span.kind'],
                 CASE WHEN s.attributes['llm.request.type'] IS NOT NULL THEN 'llm:' || s.attributes['llm.request.type'] END) AS tl_kind,
        s.attributes['langsmith.span.kind'] AS ls_kind,
        s.attributes['ai.operationId'] AS ai_op,
        s.attributes['gen_ai.system'] AS legacy_system
    FROM lake_spans s
),
classified AS (
    SELECT
        m.*,
        CASE
            WHEN scope_name ILIKE 'otel_assay%' OR scope_name ILIKE 'otel-assay%' THEN 'otel_assay'
            -- LiteLLM writes the GenAI keys, plus OpenLLMetry's llm.request.type
            WHEN scope_name = 'litellm' THEN 'otel_genai'
            WHEN oi_kind IS NOT NULL OR scope_name ILIKE 'openinference%' THEN 'openinference'
            WHEN tl_kind IS NOT NULL
              OR scope_name IN ('opentelemetry.instrumentation.langchain', 'opentelemetry.instrumentation.crewai',
                                'opentelemetry.instrumentation.openai_agents', 'opentelemetry.instrumentation.openai',
                                'opentelemetry.instrumentation.anthropic', 'opentelemetry.instrumentation.langgraph')
              THEN 'openllmetry'
            WHEN ls_kind IS NOT NULL OR scope_name = 'langsmith' THEN 'langsmith'
            WHEN ai_op IS NOT NULL THEN 'vercel_ai'
            WHEN scope_name = 'crewai' OR scope_name ILIKE 'crewai.%' THEN 'crewai_native'
            WHEN scope_name ILIKE 'autogen%' THEN 'autogen_native'
            WHEN op_name IS NOT NULL OR legacy_system IS NOT NULL OR provider IS NOT NULL THEN 'otel_genai'
            ELSE 'none'
        END AS source_convention,
        CASE
            -- Traceloop marks the graph run twice (`invoke_agent <graph>` and `<graph>.workflow`,
            -- both with operation invoke_agent); the workflow span is the run as a whole
            WHEN tl_kind = 'workflow' THEN 'workflow'
            -- LangSmith derives its operation name from the run type and writes `chat` on
            -- prompt-template runs too: formatting a template calls no model
            WHEN ls_kind = 'prompt' THEN 'other'
            WHEN op_name IN (SELECT unnest(generation_operations())) THEN 'llm'
            -- our smolagents adapter records final_answer as the tool call it is in smolagents,
            -- marked as the answer (assay.step.kind=respond): the answer, not a tool step
            WHEN op_name = 'execute_tool' THEN
                CASE WHEN scope_name ILIKE 'otel_assay%' AND attributes['assay.step.kind'] = 'respond' THEN 'respond'
                     ELSE 'tool' END
            WHEN op_name = 'invoke_agent' THEN 'agent'
            WHEN op_name = 'invoke_workflow' THEN 'workflow'
            WHEN op_name = 'plan' THEN 'reason'
            -- CrewAI native names its reasoning span, it has no standard operation
            WHEN name = 'agent reasoning' AND scope_name ILIKE 'crewai%' THEN 'reason'
            -- embeddings and the like are model calls, but no turn of the agent: their tokens
            -- are not the trial's (only llm steps carry tokens)
            WHEN op_name IN (SELECT unnest(other_operations())) THEN 'other'
            -- our own spans say what they are: otel_assay.step's `other` (its default) and
            -- `respond` kinds, and the Agents SDK's guardrails and handoffs, have no operation
            WHEN op_name IS NULL AND (scope_name ILIKE 'otel_assay%' OR scope_name ILIKE 'otel-assay%')
                 AND attributes['assay.step.kind'] IN ('other', 'respond') THEN attributes['assay.step.kind']
            WHEN oi_kind IN ('LLM', 'DECISION') THEN 'llm'
            WHEN oi_kind = 'TOOL' THEN 'tool'
            WHEN oi_kind = 'AGENT' THEN 'agent'
            -- a CHAIN is plumbing, except the root chain, which is the whole run
            WHEN oi_kind = 'CHAIN' THEN CASE WHEN parent_span_id IS NULL THEN 'workflow' ELSE 'structural' END
            WHEN oi_kind IN ('RETRIEVER', 'EMBEDDING', 'RERANKER', 'GUARDRAIL', 'EVALUATOR', 'PROMPT') THEN 'other'
            WHEN oi_kind IS NOT NULL THEN 'structural'
            WHEN tl_kind = 'tool' THEN 'tool'
            WHEN tl_kind = 'agent' THEN 'agent'
            WHEN tl_kind = 'workflow' THEN 'workflow'
            WHEN tl_kind LIKE 'llm:%' AND substr(tl_kind, 5) IN (SELECT unnest(generation_operations())) THEN 'llm'
            WHEN tl_kind LIKE 'llm:%' THEN 'other'
            WHEN tl_kind IS NOT NULL THEN 'structural'
            WHEN ls_kind = 'llm' THEN 'llm'
            WHEN ls_kind = 'tool' THEN 'tool'
            WHEN ls_kind = 'chain' THEN CASE WHEN parent_span_id IS NULL THEN 'workflow' ELSE 'structural' END
            WHEN ls_kind IN ('retriever', 'prompt', 'parser', 'embedding') THEN 'other'
            WHEN ls_kind IS NOT NULL THEN 'structural'
            -- the AI SDK's outer call repeats its model calls' tokens (ai.usage.* summed):
            -- the root one is the run, one below another span is plumbing, as a CHAIN is
            WHEN ai_op = 'ai.toolCall' THEN 'tool'
            WHEN ai_op LIKE 'ai.%.doGenerate' OR ai_op LIKE 'ai.%.doStream' THEN 'llm'
            WHEN ai_op LIKE 'ai.%.doEmbed' THEN 'other'
            WHEN ai_op IS NOT NULL THEN CASE WHEN parent_span_id IS NULL THEN 'workflow' ELSE 'structural' END
            -- pre-operation-name GenAI spans: a provider plus a model is an LLM call
            WHEN op_name IS NULL AND coalesce(provider, legacy_system) IS NOT NULL
                 AND coalesce(model, attributes['gen_ai.response.model']) IS NOT NULL THEN 'llm'
            ELSE 'structural'
        END AS step_kind
    FROM marked m
),
-- a value tested more than once is computed in a layer of its own: nested nullif() copied
-- the lookups into every branch (provider alone took 2.5 times as long, 1M-span bench lake)
kinded AS (
    SELECT *,
        -- the framework name (autogen, langchain, ...) shows up in gen_ai.system on framework
        -- spans; it is not a model provider (the final SELECT drops it)
        CASE WHEN step_kind = 'llm' AND ai_op IS NOT NULL THEN
            lower(split_part(coalesce(provider, attributes['ai.model.provider'], legacy_system), '.', 1))
             WHEN step_kind = 'llm' THEN
            lower(coalesce(provider, attributes['gen_ai.provider.name'], attributes['llm.provider'],
                           attributes['langsmith.metadata.ls_provider'], attributes['llm.system'], legacy_system))
        END AS llm_provider,
        -- the parts of the output messages (semconv layout), read once for the answer text
        -- and for whether the model asked for tools
        CASE WHEN step_kind IN ('llm', 'agent', 'workflow', 'respond') AND json_valid(attributes['gen_ai.output.messages']) THEN
            CAST(json_extract(attributes['gen_ai.output.messages'], '$[*].parts[*]') AS JSON[])
        END AS output_parts
    FROM classified
)
SELECT
    span_row,
    span_file,
    trace_id,
    span_id,
    parent_span_id,
    name,
    scope_name,
    start_time_unix_nano,
    duration_ns,
    step_kind,
    source_convention,
    -- the graph a Traceloop task span runs: a subgraph's `invoke_agent <graph>` span is a
    -- sibling of its `execute_task <graph>` span, not its parent (steps.sql re-parents)
    CASE WHEN tl_kind = 'task' THEN attributes['traceloop.entity.name'] END AS tl_task_name,
    CASE WHEN step_kind <> 'structural' THEN
        coalesce(
            -- CrewAI native puts a key hash in gen_ai.agent.name; the role is the name people know
            CASE WHEN source_convention = 'crewai_native' THEN attributes['crewai.agent.role'] END,
            agent_name,
            -- a promoted key whose value is not a string (an int name, id or code) stays in
            -- the map rather than in the typed column: read it from there too
            attributes['gen_ai.agent.name'],
            attributes['agent.name'],
            CASE WHEN oi_kind = 'AGENT' THEN coalesce(attributes['graph.node.id'], name) END,
            CASE WHEN tl_kind = 'agent' THEN attributes['traceloop.entity.name'] END,
            attributes['crewai.agent.role'],
            CASE WHEN ls_kind = 'chain' AND parent_span_id IS NULL THEN attributes['langsmith.trace.name'] END)
    END AS agent_name,
    CASE WHEN step_kind = 'tool' THEN
        coalesce(tool_name, attributes['gen_ai.tool.name'], attributes['tool.name'],
                 CASE WHEN tl_kind = 'tool' THEN attributes['traceloop.entity.name'] END,
                 attributes['ai.toolCall.name'])
    END AS tool_name,
    CASE WHEN step_kind = 'tool' THEN coalesce(tool_call_id, attributes['gen_ai.tool.call.id'], attributes['tool.id'],
                                               attributes['tool_call.id'], attributes['ai.toolCall.id']) END
        AS tool_call_id,
    CASE WHEN step_kind = 'tool' THEN
        coalesce(
            attributes['gen_ai.tool.call.arguments'],
            CASE WHEN oi_kind = 'TOOL' THEN coalesce(
                attributes['input.value'],
                -- autogen-agentchat's OpenInference instrumentor puts the arguments here;
                -- elsewhere tool.parameters is the JSON schema, recognisable by "properties"
                CASE WHEN attributes['tool.parameters'] NOT LIKE '%"properties"%' THEN attributes['tool.parameters'] END) END,
            attributes['traceloop.entity.input'],
            CASE WHEN ls_kind = 'tool' OR source_convention = 'langsmith' THEN attributes['gen_ai.prompt'] END,
            attributes['ai.toolCall.args'])
    END AS tool_args_raw,
    -- OpenLLMetry writes the model as 'unknown' when the LangChain model does not name it
    -- (no model_name / ls_model_name): that is no model, and no price table entry
    CASE WHEN step_kind = 'llm' THEN
        coalesce(nullif(model, 'unknown'), nullif(attributes['gen_ai.request.model'], 'unknown'),
                 attributes['llm.request.model_name'], attributes['llm.model_name'],
                 attributes['langsmith.metadata.ls_model_name'], attributes['ai.model.id'],
                 nullif(attributes['gen_ai.response.model'], 'unknown'), attributes['llm.response.model_name'],
                 attributes['ai.response.model'])
    END AS model,
    CASE WHEN step_kind = 'llm' THEN
        coalesce(nullif(attributes['gen_ai.response.model'], 'unknown'), attributes['llm.response.model_name'],
                 attributes['ai.response.model'])
    END AS response_model,
    CASE WHEN llm_provider NOT IN ('langchain', 'langgraph', 'autogen', 'crewai') THEN llm_provider END AS provider,
    CASE WHEN step_kind = 'llm' THEN
        coalesce(input_tokens, TRY_CAST(attributes['gen_ai.usage.input_tokens'] AS BIGINT),
                 TRY_CAST(attributes['llm.token_count.prompt'] AS BIGINT),
                 TRY_CAST(attributes['gen_ai.usage.prompt_tokens'] AS BIGINT),
                 -- the AI SDK: inputTokens since version 5, promptTokens before (and on generateObject)
                 TRY_CAST(attributes['ai.usage.inputTokens'] AS BIGINT), TRY_CAST(attributes['ai.usage.promptTokens'] AS BIGINT))
    END AS input_tokens,
    CASE WHEN step_kind = 'llm' THEN
        coalesce(output_tokens, TRY_CAST(attributes['gen_ai.usage.output_tokens'] AS BIGINT),
                 TRY_CAST(attributes['llm.token_count.completion'] AS BIGINT),
                 TRY_CAST(attributes['gen_ai.usage.completion_tokens'] AS BIGINT),
                 TRY_CAST(attributes['ai.usage.outputTokens'] AS BIGINT),
                 TRY_CAST(attributes['ai.usage.completionTokens'] AS BIGINT))
    END AS output_tokens,
    CASE WHEN step_kind = 'llm' THEN
        coalesce(TRY_CAST(attributes['llm.cost.total'] AS DOUBLE),
                 -- LiteLLM's own price of the call
                 TRY_CAST(attributes['gen_ai.cost.total_cost'] AS DOUBLE),
                 TRY_CAST(attributes['llm.cost.prompt'] AS DOUBLE) + TRY_CAST(attributes['llm.cost.completion'] AS DOUBLE))
    END AS cost_attr_usd,
    CASE WHEN status_code = 2 OR attributes['gen_ai.task.status'] = 'failure' THEN 'error' ELSE 'ok' END AS status,
    -- LangChain callback tracers (OpenInference) write the status message as
    -- "ValueError('boom')Traceback (most recent call last): ...": the class name is the
    -- error type, not the whole repr plus stack (which differs per line number)
    coalesce(error_type, CASE WHEN status_code = 2 THEN coalesce(
        attributes['error.type'],
        CASE WHEN status_message LIKE '%Traceback (most recent call last)%' THEN coalesce(
            nullif(regexp_extract(status_message, '^\s*([A-Za-z_][A-Za-z0-9_.]*)\(', 1), ''),
            nullif(trim(split_part(status_message, 'Traceback (most recent call last)', 1)), '')) END,
        nullif(status_message, '')) END)
        AS error_type,
    CASE WHEN step_kind = 'llm' THEN
        coalesce(attributes['gen_ai.response.finish_reasons'], attributes['llm.finish_reason'],
                 attributes['gen_ai.completion.0.finish_reason'], attributes['ai.response.finishReason'])
    END AS finish_reasons,
    -- the assistant's final text part, in whichever layout the dialect uses
    CASE
        WHEN step_kind IN ('llm', 'agent', 'workflow') THEN coalesce(
            list_filter(output_parts, lambda p: p->>'type' = 'text')[-1]->>'content',
            attributes['gen_ai.completion.0.content'],
            attributes['llm.output_messages.0.message.content'],
            CASE WHEN json_valid(attributes['gen_ai.completion']) THEN coalesce(
                attributes['gen_ai.completion']->>'$.content',
                attributes['gen_ai.completion']->>'$.generations[0][0].text',
                attributes['gen_ai.completion']->>'$.choices[0].message.content')
            ELSE attributes['gen_ai.completion'] END,
            -- the AI SDK: the text, or generateObject's object as JSON ('' on a turn of tool calls)
            nullif(attributes['ai.response.text'], ''), attributes['ai.response.object'],
            CASE WHEN step_kind <> 'llm' THEN attributes['output.value'] END)
        WHEN step_kind = 'tool' THEN coalesce(
            attributes['gen_ai.tool.call.result'], attributes['output.value'], attributes['traceloop.entity.output'],
            attributes['ai.toolCall.result'],
            CASE WHEN source_convention = 'langsmith' THEN attributes['gen_ai.completion'] END)
        -- a marked answer: its output messages (otel_assay.step), or the final_answer tool's result
        WHEN step_kind = 'respond' THEN coalesce(
            list_filter(output_parts, lambda p: p->>'type' = 'text')[-1]->>'content',
            attributes['gen_ai.tool.call.result'])
    END AS output_text,
    -- did the LLM ask for tools? NULL when the span does not say
    CASE WHEN step_kind = 'llm' THEN coalesce(
        len(list_filter(output_parts, lambda p: p->>'type' = 'tool_call')) > 0,
        -- LangSmith: the LLMResult as JSON; the AIMessage is serialised as a LangChain
        -- constructor (kwargs) or as plain fields. Without this a turn that asked for
        -- tools and was interrupted before them (interrupt_before=["tools"]) read as respond
        CASE WHEN source_convention = 'langsmith' AND json_valid(attributes['gen_ai.completion']) THEN
            coalesce(json_array_length(attributes['gen_ai.completion'], '$.generations[0][0].message.kwargs.tool_calls'),
                     json_array_length(attributes['gen_ai.completion'], '$.generations[0][0].message.tool_calls')) > 0 END,
        CASE WHEN attributes['gen_ai.completion.0.tool_calls.0.name'] IS NOT NULL
               OR attributes['llm.output_messages.0.message.tool_calls.0.tool_call.function.name'] IS NOT NULL
               OR attributes['ai.response.toolCalls'] IS NOT NULL
             THEN true END,
        -- `tool-calls` is the AI SDK's (its unified finish reason), with a hyphen
        CASE WHEN coalesce(attributes['gen_ai.response.finish_reasons'], attributes['llm.finish_reason'],
                           attributes['gen_ai.completion.0.finish_reason'], attributes['ai.response.finishReason'])
                  SIMILAR TO '.*(tool_call|tool-call|function_call|tool_use).*'
             THEN true END,
        CASE WHEN attributes['gen_ai.output.messages'] IS NOT NULL
               OR attributes['gen_ai.completion.0.content'] IS NOT NULL
               OR attributes['llm.output_messages.0.message.content'] IS NOT NULL
               OR coalesce(attributes['gen_ai.response.finish_reasons'], attributes['llm.finish_reason'],
                           attributes['ai.response.finishReason']) IS NOT NULL
             THEN false END)
    END AS requested_tools
FROM kinded;
