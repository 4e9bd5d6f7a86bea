"""Every attribute name otel-assay reads or writes, in one place.

The GenAI semantic conventions are still "development" status and keys move between
versions (``gen_ai.system`` became ``gen_ai.provider.name`` in v1.37), so code refers to
these constants, never to string literals.
"""

# --- OpenTelemetry GenAI semantic conventions (emitted and read) -----------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_WORKFLOW_NAME = "gen_ai.workflow.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"  # pre-1.37 name of gen_ai.provider.name
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"  # deprecated
GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"  # deprecated
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
ERROR_TYPE = "error.type"

OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"
OP_INVOKE_AGENT = "invoke_agent"
OP_INVOKE_WORKFLOW = "invoke_workflow"
OP_PLAN = "plan"

# --- resource attributes --------------------------------------------------------------
SERVICE_NAME = "service.name"
SERVICE_VERSION = "service.version"

# --- otel-assay's own namespace: a trial's identity (copied onto every span of the trial,
# so any span says which trial it belongs to) and its result (on the trial's root span) ---
ASSAY_SCENARIO = "assay.scenario"
ASSAY_AGENT_VERSION = "assay.agent.version"
ASSAY_RUN_ID = "assay.run.id"
ASSAY_TRIAL_INDEX = "assay.trial.index"
ASSAY_TRIAL_OUTCOME = "assay.trial.outcome"
ASSAY_TRIAL_SCORE = "assay.trial.score"
ASSAY_ERROR_CLASS = "assay.error.class"

# --- the lake: which attribute keys get a dedicated, typed column ----------------------
# (column name, attribute key, arrow type name). A key is promoted only when its value
# has the column's type; otherwise it stays in the `attributes` map. A promoted key is
# not repeated in the map, so every attribute lives in exactly one place and a span can
# be reconstructed exactly. Fallback keys (gen_ai.system, gen_ai.response.model,
# deprecated token keys) stay in the map: the `steps` view does dialect normalisation.
PROMOTED_SPAN_ATTRIBUTES: tuple[tuple[str, str, str], ...] = (
    ("op", GEN_AI_OPERATION_NAME, "string"),
    ("agent_name", GEN_AI_AGENT_NAME, "string"),
    ("tool_name", GEN_AI_TOOL_NAME, "string"),
    ("tool_call_id", GEN_AI_TOOL_CALL_ID, "string"),
    ("model", GEN_AI_REQUEST_MODEL, "string"),
    ("provider", GEN_AI_PROVIDER_NAME, "string"),
    ("input_tokens", GEN_AI_USAGE_INPUT_TOKENS, "int64"),
    ("output_tokens", GEN_AI_USAGE_OUTPUT_TOKENS, "int64"),
    ("error_type", ERROR_TYPE, "string"),
    ("run_id", ASSAY_RUN_ID, "string"),
    ("scenario", ASSAY_SCENARIO, "string"),
    ("version", ASSAY_AGENT_VERSION, "string"),
    ("trial_index", ASSAY_TRIAL_INDEX, "int64"),
    ("outcome", ASSAY_TRIAL_OUTCOME, "string"),
    ("score", ASSAY_TRIAL_SCORE, "double"),
    ("error_class", ASSAY_ERROR_CLASS, "string"),
)

# --- added by the capture layer (otel_assay/capture) ------------------------------------
GEN_AI_AGENT_DESCRIPTION = "gen_ai.agent.description"
GEN_AI_TOOL_DESCRIPTION = "gen_ai.tool.description"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_EVALUATION_RESULT = "gen_ai.evaluation.result"  # event name
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
OP_TEXT_COMPLETION = "text_completion"
OP_RETRIEVAL = "retrieval"
GEN_AI_DATA_SOURCE_ID = "gen_ai.data_source.id"
GEN_AI_RETRIEVAL_QUERY_TEXT = "gen_ai.retrieval.query.text"  # opt-in content
GEN_AI_RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"  # opt-in content: JSON [{"id", "score"}]

# The step kind otel-assay's own adapters assign (llm/tool/agent/reason/respond/workflow/
# other), so the `steps` view need not guess: e.g. a smolagents `final_answer` tool call is
# an execute_tool span with assay.step.kind=respond, a planning step is `plan` / reason.
ASSAY_STEP_KIND = "assay.step.kind"
ASSAY_FRAMEWORK = "assay.framework"  # which adapter emitted the span (langgraph, crewai, ...)
ASSAY_TRIAL_IMPLICIT = "assay.trial.implicit"  # true on trials opened by OTEL_ASSAY_SCENARIO
ASSAY_GRAPH_NODE = "assay.graph.node"  # LangGraph node a step ran in
ASSAY_HANDOFF_FROM = "assay.handoff.from_agent"
ASSAY_HANDOFF_TO = "assay.handoff.to_agent"
ASSAY_GUARDRAIL_NAME = "assay.guardrail.name"
ASSAY_GUARDRAIL_TRIGGERED = "assay.guardrail.triggered"
# on an agent / workflow span (and a trial), or a step, that stopped before completing without
# failing: why ("caller_stopped": the caller stopped a streamed run; "interrupted": the graph
# paused for a human, to be resumed by a later invocation, or someone pressed Ctrl-C)
ASSAY_INCOMPLETE = "assay.incomplete"
# on the agent span (and implicit trial) of a LangGraph invocation resuming an interrupted
# one on the same checkpointer thread: the trace id (hex) of the interrupted invocation
ASSAY_RESUMES = "assay.resumes"
# on a chat span answered from a client-side response cache: no model call, no tokens spent
ASSAY_CACHE_HIT = "assay.cache_hit"
# the keys the trial copies onto every span inside it (baggage + span processor)
ASSAY_PROPAGATED = (ASSAY_SCENARIO, ASSAY_AGENT_VERSION, ASSAY_RUN_ID, ASSAY_TRIAL_INDEX)

# --- metamorphic relations: a follow-up trial names its source trial (oracle issue) ---
ASSAY_MR_RELATION = "assay.mr.relation"
ASSAY_MR_SOURCE = "assay.mr.source"  # trace id (hex) of the source trial
ASSAY_MR_TRANSFORM = "assay.mr.transform"
