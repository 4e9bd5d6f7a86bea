"""Hand-built spans in the shapes other instrumentations write, where a recording with the
real library is not possible or a table of cases says more: which operation names are
model calls, what an unknown one does to a trial."""

from __future__ import annotations

import pytest

from .conftest import rows
from .lakes import sid, span, tid, write_lake

MODEL = {"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
         "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 3}
GPT_4O_MINI_COST = (12 * 0.15 + 3 * 0.60) / 1e6

# gen_ai.operation.name values of a model call that produces a turn: the GenAI conventions'
# and LiteLLM's call types (acompletion is every async LiteLLM call)
GENERATION = ["chat", "text_completion", "generate_content", "completion", "acompletion", "atext_completion",
              "agenerate_content", "responses", "aresponses", "anthropic_messages", "aanthropic_messages"]
# model calls that produce no turn: `other` steps, their tokens are not the trial's
NO_TURN = ["embeddings", "embedding", "aembedding", "rerank", "arerank", "moderation", "amoderation",
           "image_generation", "aimage_generation", "transcription", "atranscription", "speech", "aspeech"]


def _trial(eng, n=1):
    return rows(eng, "SELECT * FROM trials WHERE trace_id = ?", [tid(n)])[0]


@pytest.mark.parametrize("op", GENERATION)
def test_every_generation_operation_name_is_an_llm_call(op, tmp_path, open_engine):
    write_lake(tmp_path, [span(1, 1, None, f"{op} gpt-4o-mini", 0, 10, {**MODEL, "gen_ai.operation.name": op},
                               scope="litellm")])
    t = _trial(open_engine(tmp_path))
    assert (t["n_steps"], t["n_llm"], t["input_tokens"], t["output_tokens"], t["error_class"], t["n_unknown_ops"]) == (
        1, 1, 12, 3, None, 0)
    assert t["cost_usd"] == pytest.approx(GPT_4O_MINI_COST, rel=1e-12)


@pytest.mark.parametrize("op", NO_TURN)
def test_a_model_call_without_a_turn_is_an_other_step(op, tmp_path, open_engine):
    write_lake(tmp_path, [span(1, 1, None, f"{op} gpt-4o-mini", 0, 10, {**MODEL, "gen_ai.operation.name": op},
                               scope="litellm")])
    eng = open_engine(tmp_path)
    assert [s["step_kind"] for s in rows(eng, "SELECT step_kind FROM steps")] == ["other"]
    t = _trial(eng)
    assert (t["n_steps"], t["n_llm"], t["input_tokens"], t["cost_usd"], t["n_unknown_ops"]) == (1, 0, 0, 0.0, 0)


@pytest.mark.parametrize("request_type", ["chat", "completion", "acompletion", "atext_completion"])
def test_llm_request_type_alone_names_a_model_call(request_type, tmp_path, open_engine):
    # OpenLLMetry's key, without an operation name (older Traceloop SDKs)
    write_lake(tmp_path, [span(1, 1, None, "openai.chat", 0, 10, {**MODEL, "llm.request.type": request_type},
                               scope="opentelemetry.instrumentation.openai")])
    t = _trial(open_engine(tmp_path))
    assert (t["n_llm"], t["input_tokens"], t["output_tokens"], t["error_class"]) == (1, 12, 3, None)


def test_an_unknown_operation_name_is_counted_not_silently_dropped(tmp_path, open_engine):
    # a model call under a name no mapping knows: no step (otel-assay cannot tell what it
    # is), so the trial is an empty run, and the trial says why it may be
    write_lake(tmp_path, [
        span(1, 1, None, "summon gpt-4o-mini", 0, 10, {**MODEL, "gen_ai.operation.name": "summon"}, scope="x"),
        span(1, 2, 1, "summon gpt-4o-mini", 1, 9, {**MODEL, "gen_ai.operation.name": "summon"}, scope="x"),
        span(2, 1, None, "chat gpt-4o-mini", 0, 10, {**MODEL, "gen_ai.operation.name": "chat"}, scope="x"),
    ])
    eng = open_engine(tmp_path)
    unknown, known = _trial(eng, 1), _trial(eng, 2)
    assert (unknown["n_steps"], unknown["error_class"], unknown["n_unknown_ops"]) == (0, "empty-run", 2)
    assert (known["n_llm"], known["error_class"], known["n_unknown_ops"]) == (1, None, 0)


# ----------------------------------------------------------------------------- nested model calls
# OpenLit (1.33, LangChain and OpenAI instrumented together) reports one model call twice: a
# LangChain span with tokens it estimated, and inside it the OpenAI span with the provider's.
# The shapes (keys, values, nesting) are those of a public OpenLit capture of a
# prompt | ChatOpenAI chain. OpenLit 1.45, which test_emitters.py records, no longer emits
# the inner span (it suppresses its OpenAI span inside LangChain's); 1.33 needs an
# OpenTelemetry API of 1.42 or older (it imports opentelemetry._events) and, recorded so
# around LangChain 1.x, fails to instrument LangChain (it wraps langchain_community):
# only these hand-built cases test the rule
OPENLIT = "openlit.otel.tracing"
OPENLIT_LANGCHAIN = {"telemetry.sdk.name": "openlit", "gen_ai.operation.name": "chat", "gen_ai.system": "langchain",
                     "gen_ai.request.model": "gpt-3.5-turbo", "gen_ai.response.model": "gpt-3.5-turbo",
                     "gen_ai.usage.input_tokens": 124, "gen_ai.usage.output_tokens": 399,
                     "gen_ai.usage.total_tokens": 523, "gen_ai.usage.cost": 0.0006605, "server.address": "NOT_FOUND"}
OPENLIT_OPENAI = {"telemetry.sdk.name": "openlit", "gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                  "gen_ai.request.model": "gpt-3.5-turbo", "gen_ai.response.model": "gpt-3.5-turbo-0125",
                  "gen_ai.usage.input_tokens": 39, "gen_ai.usage.output_tokens": 7, "gen_ai.usage.total_tokens": 46,
                  "gen_ai.usage.cost": 3e-05, "gen_ai.response.finish_reasons": ("stop",),
                  "server.address": "api.openai.com"}
GPT_35_COST = (39 * 0.50 + 7 * 1.50) / 1e6


def test_a_model_call_reported_twice_nested_by_one_convention_counts_once(tmp_path, open_engine):
    write_lake(tmp_path, [
        span(1, 1, None, "assay.trial qa", 0, 100, {"assay.scenario": "qa"}),
        span(1, 2, 1, "chat gpt-3.5-turbo", 1, 90, OPENLIT_LANGCHAIN, scope=OPENLIT),
        span(1, 3, 2, "chat gpt-3.5-turbo", 2, 89, OPENLIT_OPENAI, scope=OPENLIT),
    ])
    eng = open_engine(tmp_path)
    st = rows(eng, "SELECT * FROM steps WHERE trace_id = ?", [tid(1)])
    # the inner span, the provider's report, in the wrapper's place at the top
    assert [(s["span_id"], s["step_kind"], s["depth"], s["step_parent_id"], s["input_tokens"], s["output_tokens"],
             s["provider"], s["response_model"]) for s in st] == [
        (sid(3), "respond", 1, None, 39, 7, "openai", "gpt-3.5-turbo-0125")]
    t = _trial(eng)
    assert (t["n_steps"], t["n_llm"], t["input_tokens"], t["output_tokens"]) == (1, 1, 39, 7)
    assert t["cost_usd"] == pytest.approx(GPT_35_COST, rel=1e-12)


def test_nested_model_calls_of_a_chain_each_count_once(tmp_path, open_engine):
    # two calls of a chain, each wrapped, under an agent step: the agent keeps two LLM steps
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
    write_lake(tmp_path, [
        span(1, 1, None, "invoke_agent a", 0, 100, agent, scope=OPENLIT),
        span(1, 2, 1, "chat gpt-3.5-turbo", 1, 40, OPENLIT_LANGCHAIN, scope=OPENLIT),
        span(1, 3, 2, "chat gpt-3.5-turbo", 2, 39, OPENLIT_OPENAI, scope=OPENLIT),
        span(1, 4, 1, "chat gpt-3.5-turbo", 50, 90, OPENLIT_LANGCHAIN, scope=OPENLIT),
        span(1, 5, 4, "chat gpt-3.5-turbo", 51, 89, OPENLIT_OPENAI, scope=OPENLIT),
    ])
    eng = open_engine(tmp_path)
    st = rows(eng, "SELECT * FROM steps WHERE trace_id = ? ORDER BY seq", [tid(1)])
    assert [(s["span_id"], s["step_kind"], s["step_parent_id"], s["depth"]) for s in st] == [
        (sid(1), "agent", None, 1), (sid(3), "llm", sid(1), 2), (sid(5), "respond", sid(1), 2)]
    t = _trial(eng)
    assert (t["n_llm"], t["input_tokens"], t["output_tokens"]) == (2, 78, 14)


@pytest.mark.parametrize("case", ["two calls inside", "a tool inside", "other model", "other convention",
                                  "a call below the inner one"])
def test_nested_model_calls_that_are_not_one_call_stay_apart(case, tmp_path, open_engine):
    inner = dict(OPENLIT_OPENAI)
    spans = [span(1, 1, None, "chat gpt-3.5-turbo", 0, 100, OPENLIT_LANGCHAIN, scope=OPENLIT)]
    if case == "other model":
        inner["gen_ai.request.model"] = inner["gen_ai.response.model"] = "gpt-4o-mini"
    spans.append(span(1, 2, 1, "chat", 1, 40, inner,
                      scope="openinference.instrumentation.openai" if case == "other convention" else OPENLIT))
    if case == "two calls inside":
        spans.append(span(1, 3, 1, "chat", 50, 90, OPENLIT_OPENAI, scope=OPENLIT))
    if case == "a tool inside":
        spans.append(span(1, 3, 1, "execute_tool t", 50, 90, {"gen_ai.operation.name": "execute_tool",
                                                             "gen_ai.tool.name": "t"}, scope=OPENLIT))
    if case == "a call below the inner one":
        spans.append(span(1, 3, 2, "chat", 2, 39, OPENLIT_OPENAI, scope=OPENLIT))
    write_lake(tmp_path, spans)
    eng = open_engine(tmp_path)
    n = rows(eng, "SELECT count(*) AS n FROM steps WHERE trace_id = ? AND llm_call", [tid(1)])[0]["n"]
    # the outer span is a step of its own; only the innermost pair of a chain is one call.
    # Two conventions are the cross-instrumentation rule's case: one step, of the convention
    # that rule prefers (here the outer span's)
    assert n == {"two calls inside": 3, "a tool inside": 2, "other model": 2, "other convention": 1,
                 "a call below the inner one": 2}[case]
