"""Foreign dialects from the real emitters.

Every emitter ran the same scripted agent (tool call add(2, 3) -> 5 -> "The answer is 5").
The recorded OTLP/JSON documents in tests/fixtures/otlp/ (tests/fixtures/otlp/record.py
regenerates them) are loaded with the collector's own OTLP/JSON mapper, so the
normalisation is tested without any emitter installed. The live tests re-run the emitters
(when installed) and check that what they emit today still normalises the same way.

The work steps (LLM calls, tool calls, the response) must come out the same whatever the
dialect; the container steps (graph run, node, agent) differ by dialect because the
emitters structure them differently, and each fixture pins its own.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from otel_assay.collect.receiver import Collector
from otel_assay.collect.server import Receiver

from .conftest import rows
from .lakes import write_otlp_json

FIXTURES = Path(__file__).parent.parent / "fixtures" / "otlp"
RECORDER = FIXTURES / "record.py"

# pip packages each live test needs (versions as verified; the lead adds them to CI envs)
EMITTER_PACKAGES = {
    "langgraph_openinference": ["langgraph==1.2.22", "langchain-core==1.7.2", "openinference-instrumentation-langchain==0.1.80"],
    "langgraph_traceloop": ["langgraph==1.2.22", "langchain-core==1.7.2", "opentelemetry-instrumentation-langchain==0.62.4"],
    "langgraph_langsmith": ["langgraph==1.2.22", "langchain-core==1.7.2", "langsmith==0.15.0"],
    "autogen_native": ["autogen-agentchat==0.7.5", "autogen-core==0.7.5", "autogen-ext==0.7.5"],
    "autogen_native_openinference": ["autogen-agentchat==0.7.5", "autogen-core==0.7.5", "autogen-ext==0.7.5",
                                     "openinference-instrumentation-autogen-agentchat==0.1.22"],
    "crewai_native": ["crewai==1.15.30"],
}
IMPORTS = {
    "langgraph_openinference": ["langgraph", "openinference.instrumentation.langchain"],
    "langgraph_traceloop": ["langgraph", "opentelemetry.instrumentation.langchain"],
    "langgraph_langsmith": ["langgraph", "langsmith"],
    "autogen_native": ["autogen_agentchat", "autogen_ext.models.replay"],
    "autogen_native_openinference": ["autogen_agentchat", "openinference.instrumentation.autogen_agentchat"],
    "crewai_native": ["crewai.telemetry.tracing"],
}

LLM_TOOL_RESPOND = [("llm", None), ("tool", "add"), ("respond", None)]
# (step_kind, tool_name) of every step, in seq order, per recorded emitter
EXPECTED = {
    "langgraph_openinference": [("workflow", None), ("agent", None), ("llm", None), ("tool", "add"),
                                ("agent", None), ("respond", None)],
    "langgraph_traceloop": [("agent", None), ("workflow", None), *LLM_TOOL_RESPOND],
    "langgraph_langsmith": [("workflow", None), *LLM_TOOL_RESPOND],
    # AutoGen's native tracing has no LLM spans (instrumentation.md §6.3): only the agent and the tool
    "autogen_native": [("agent", None), ("tool", "add")],
    # OpenInference duplicates the agent and the tool: each counts once
    "autogen_native_openinference": [("workflow", None), ("agent", None), ("tool", "add")],
    "crewai_native": [("workflow", None), ("agent", None), *LLM_TOOL_RESPOND],
}
HAS_LLM_SPANS = [n for n, seq in EXPECTED.items() if ("llm", None) in seq]


def _steps(lake, open_engine):
    eng = open_engine(lake)
    # AutoGen's create_agent span is its own trace; the run is the trace with the tool call
    run = rows(eng, "SELECT trace_id FROM trials ORDER BY n_tool DESC, n_steps DESC LIMIT 1")[0]["trace_id"]
    return eng, rows(eng, "SELECT * FROM steps WHERE trace_id = ? ORDER BY seq", [run])


def check(lake, name, open_engine):
    eng, st = _steps(lake, open_engine)
    assert [(s["step_kind"], s["tool_name"]) for s in st] == EXPECTED[name]
    work = [s for s in st if s["step_kind"] in ("llm", "tool", "respond")]
    tool = next(s for s in work if s["step_kind"] == "tool")
    if tool["source_convention"] != "autogen_native" or name.endswith("openinference"):
        assert tool["tool_args"] == '{"a":2,"b":3}'
    if name in HAS_LLM_SPANS:
        assert [(s["input_tokens"], s["output_tokens"]) for s in work if s["llm_call"]] in (
            [(11, 7), (20, 5)], [(11, 7), (11, 7)])  # CrewAI's scripted LLM reports the same usage twice
        assert "The answer is 5" in (work[-1]["output_text"] or "")
        assert all(s["llm_call"] == (s["step_kind"] != "tool") for s in work)
    # every step is a child of a step, except the top one
    assert sum(s["step_parent_id"] is None for s in st) == 1
    trial = rows(eng, "SELECT * FROM trials WHERE trace_id = ?", [st[0]["trace_id"]])[0]
    assert trial["scenario"] is None and trial["n_steps"] == len(st)
    return st


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_fixture(name, tmp_path, open_engine):
    path = FIXTURES / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path.name} not recorded (run tests/fixtures/otlp/record.py {name})")
    check(write_otlp_json(tmp_path, path), name, open_engine)


def test_langgraph_dialects_agree_on_work_steps(tmp_path, open_engine):
    seqs = {}
    for name in ("langgraph_openinference", "langgraph_traceloop", "langgraph_langsmith"):
        _, st = _steps(write_otlp_json(tmp_path / name, FIXTURES / f"{name}.json"), open_engine)
        seqs[name] = [(s["step_kind"], s["tool_name"], s["tool_args"], s["input_tokens"], s["output_tokens"])
                      for s in st if s["step_kind"] in ("llm", "tool", "respond")]
    assert len(set(map(tuple, seqs.values()))) == 1, seqs


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_live_emitter(name, tmp_path, open_engine):
    for module in IMPORTS[name]:
        pytest.importorskip(module)
    env = {**os.environ, "OTEL_ASSAY_FIXTURE_DIR": str(tmp_path)}
    subprocess.run([sys.executable, str(RECORDER), name], check=True, env=env, stdin=subprocess.DEVNULL,
                   capture_output=True, timeout=300)
    check(write_otlp_json(tmp_path / "lake", tmp_path / f"{name}.json"), name, open_engine)


# ----------------------------------------------------------------------------- harder runs
# Recorded by record.py like the fixtures above; each test also re-runs its emitter when
# it is installed.
HARDER = {
    "langgraph_subgraph_traceloop": ["langgraph", "opentelemetry.instrumentation.langchain"],
    "langgraph_tool_error_openinference": ["langgraph", "openinference.instrumentation.langchain"],
    "langgraph_interrupt_langsmith": ["langgraph", "langsmith"],
    "prompt_chain_langsmith": ["langchain_core", "langsmith"],
    "litellm": ["litellm"],
    "openai_v2": ["openai", "opentelemetry.instrumentation.openai_v2"],
    "openai_v2_content": ["openai", "opentelemetry.instrumentation.openai_v2"],
    # in its own environment (scripts/test): OpenLit pins the OTel SDK below the latest
    "langgraph_openlit": ["openlit", "langchain_openai", "langgraph"],
}


def _installed(module: str) -> bool:
    """Found, not imported: the emitter runs in a subprocess, and importing LiteLLM here
    would fetch its price map over the network. find_spec imports the parent packages, and
    raises when one of them is missing."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@contextlib.contextmanager
def receiving(lake: Path):
    """otel-assay's receiver on a loopback port, OTLP/HTTP only; yields its traces URL and,
    stopping, flushes what it took into ``lake``."""
    receiver = Receiver(Collector(lake), grpc_addr=None, http_addr=("127.0.0.1", 0))
    receiver.start()
    try:
        yield f"http://127.0.0.1:{receiver.listeners[0].port}/v1/traces"
    finally:
        receiver.stop()


def _lake(name, tmp_path, live):
    """The recorded fixture in a lake; or, live, the emitter re-run, its spans sent by the
    standard OTLP/HTTP exporter to the receiver, which writes the lake."""
    if not live:
        return write_otlp_json(tmp_path / "lake", FIXTURES / f"{name}.json")
    for module in HARDER[name]:
        if not _installed(module):
            pytest.skip(f"{module} is not installed")
    with receiving(tmp_path / "lake") as url:
        env = {**os.environ, "OTEL_ASSAY_FIXTURE_DIR": str(tmp_path), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url}
        # record.py (not --child=) sets the emitter's environment (LangSmith's OTel mode, offline)
        subprocess.run([sys.executable, str(RECORDER), name], check=True, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=300)
    return tmp_path / "lake"


@pytest.mark.parametrize("live", [False, True], ids=["recorded", "live"])
def test_traceloop_subgraph_steps_are_children_of_the_subgraph_agent(live, tmp_path, open_engine):
    # Traceloop's `invoke_agent inner_graph` is a sibling of the `execute_task inner_graph`
    # span that holds the subgraph's LLM and tool calls: they were the outer graph's steps
    eng, st = _steps(_lake("langgraph_subgraph_traceloop", tmp_path, live), open_engine)
    assert [(s["step_kind"], s["tool_name"], s["depth"]) for s in st] == [
        ("agent", None, 1), ("workflow", None, 2), ("agent", None, 3),
        ("llm", None, 4), ("tool", "add", 4), ("respond", None, 4)]
    inner = st[2]
    assert inner["agent_name"] == "inner_graph"
    assert all(s["step_parent_id"] == inner["span_id"] and s["agent_name"] == "inner_graph" for s in st[3:])
    assert [(s["input_tokens"], s["output_tokens"]) for s in st if s["llm_call"]] == [(11, 7), (20, 5)]
    # the scripted model has no name: Traceloop's placeholder 'unknown' is no model
    assert [s["model"] for s in st if s["llm_call"]] == [None, None]
    assert rows(eng, "SELECT models FROM trials WHERE trace_id = ?", [st[0]["trace_id"]])[0]["models"] == []


@pytest.mark.parametrize("live", [False, True], ids=["recorded", "live"])
def test_openinference_error_type_is_the_exception_class(live, tmp_path, open_engine):
    # OpenInference's status message is "ValueError('boom failed')Traceback ...": the error
    # type is the class, and langgraph's frames in the stack (step_timeout) are no timeout
    eng, st = _steps(_lake("langgraph_tool_error_openinference", tmp_path, live), open_engine)
    assert [(s["step_kind"], s["tool_name"], s["status"], s["error_type"]) for s in st] == [
        ("workflow", None, "error", "ValueError"), ("agent", None, "ok", None),
        ("llm", None, "ok", None), ("tool", "boom", "error", "ValueError")]
    trial = rows(eng, "SELECT * FROM trials WHERE trace_id = ?", [st[0]["trace_id"]])[0]
    assert trial["error_class"] is None and trial["n_errors"] == 2


@pytest.mark.parametrize("live", [False, True], ids=["recorded", "live"])
def test_langsmith_turn_that_asked_for_tools_is_no_respond(live, tmp_path, open_engine):
    # interrupt_before=["tools"] ends the run right after the model asked for add(2, 3):
    # no tool step follows, so only the tool call in LangSmith's gen_ai.completion (the
    # serialised LLMResult) says the turn was not an answer
    eng, st = _steps(_lake("langgraph_interrupt_langsmith", tmp_path, live), open_engine)
    assert [(s["step_kind"], s["requested_tools"]) for s in st] == [("workflow", None), ("llm", True)]


@pytest.mark.parametrize("live", [False, True], ids=["recorded", "live"])
def test_langsmith_prompt_template_is_no_llm_call(live, tmp_path, open_engine):
    # LangSmith writes gen_ai.operation.name=chat on prompt-template runs: read as an LLM
    # call, the template doubled n_llm and, having no model, made the trial's cost NULL.
    # The template formatted outside any run is a trace of its own: no trial of its own
    eng = open_engine(_lake("prompt_chain_langsmith", tmp_path, live))
    trials = rows(eng, "SELECT * FROM trials")
    assert len(trials) == 1
    trial = trials[0]
    assert (trial["n_steps"], trial["n_llm"], trial["n_tool"], trial["error_class"]) == (3, 1, 0, None)
    assert (trial["input_tokens"], trial["output_tokens"]) == (12, 3)
    assert trial["cost_usd"] == pytest.approx((12 * 0.15 + 3 * 0.60) / 1e6, rel=1e-12)
    assert trial["models"] == ["gpt-4o-mini"]
    st = rows(eng, "SELECT * FROM steps WHERE trace_id = ? ORDER BY seq", [trial["trace_id"]])
    assert [(s["step_kind"], s["name"]) for s in st] == [
        ("workflow", "RunnableSequence"), ("other", "ChatPromptTemplate"), ("respond", "ScriptedChat")]
    assert st[-1]["output_text"] == "Bonjour"


@pytest.mark.parametrize("live", [False, True], ids=["recorded", "live"])
def test_litellm_async_call_is_an_llm_call(live, tmp_path, open_engine):
    # LiteLLM names each async call's operation `acompletion` (llm.request.type too): read
    # as `other`, the call vanished and its trial was an empty run, out of the pass rates
    eng = open_engine(_lake("litellm", tmp_path, live))
    assert sorted(r["v"] for r in rows(eng, "SELECT attributes['llm.request.type'] AS v FROM spans "
                                            "WHERE name = 'litellm_request'")) == ["acompletion", "completion"]
    trials = rows(eng, "SELECT * FROM trials")
    assert len(trials) == 2
    for t in trials:
        assert (t["n_steps"], t["n_llm"], t["input_tokens"], t["output_tokens"], t["error_class"], t["n_unknown_ops"]) == (
            1, 1, 12, 3, None, 0)
        assert t["cost_usd"] == pytest.approx((12 * 0.15 + 3 * 0.60) / 1e6, rel=1e-12)
    st = rows(eng, "SELECT * FROM steps")
    # LiteLLM prices the call itself (gen_ai.cost.total_cost): that cost is read first
    assert {(s["step_kind"], s["model"], s["provider"], s["cost_source"], s["source_convention"], s["output_text"])
            for s in st} == {("respond", "gpt-4o-mini", "openai", "attribute", "otel_genai", "Bonjour")}


@pytest.mark.parametrize("live", [False, True], ids=["recorded", "live"])
@pytest.mark.parametrize("name", ["openai_v2", "openai_v2_content"])
def test_opentelemetry_openai_instrumentation_tool_loop(name, live, tmp_path, open_engine):
    # The OpenTelemetry GenAI OpenAI instrumentation traces each chat completion of the
    # openai client (the tool the application runs is no span of it) under the
    # application's own span, which is no step. Message content is off by default: the
    # finish reasons alone tell the call that asked for add(2, 3) from the answer
    eng = open_engine(_lake(name, tmp_path, live))
    trials = rows(eng, "SELECT * FROM trials")
    assert len(trials) == 1
    trial = trials[0]
    assert (trial["n_spans"], trial["n_steps"], trial["n_llm"], trial["n_tool"], trial["input_tokens"],
            trial["output_tokens"], trial["models"], trial["error_class"], trial["counted"], trial["n_unknown_ops"]) == (
        3, 2, 2, 0, 31, 12, ["gpt-4o-mini"], None, True, 0)
    assert trial["cost_usd"] == pytest.approx((31 * 0.15 + 12 * 0.60) / 1e6, rel=1e-12)
    st = rows(eng, "SELECT * FROM steps ORDER BY seq")
    assert [(s["step_kind"], s["name"], s["depth"], s["step_parent_id"], s["model"], s["response_model"],
             s["provider"], s["source_convention"], s["input_tokens"], s["output_tokens"], s["cost_source"],
             s["finish_reasons"], s["requested_tools"]) for s in st] == [
        ("llm", "chat gpt-4o-mini", 1, None, "gpt-4o-mini", "gpt-4o-mini", "openai", "otel_genai", 11, 7,
         "price_table", '["tool_calls"]', True),
        ("respond", "chat gpt-4o-mini", 1, None, "gpt-4o-mini", "gpt-4o-mini", "openai", "otel_genai", 20, 5,
         "price_table", '["stop"]', False)]
    # with SPAN_ONLY the answer's text is read from gen_ai.output.messages
    assert [s["output_text"] for s in st] == [None, "The answer is 5" if name == "openai_v2_content" else None]
    assert st[0]["cost_usd"] == pytest.approx((11 * 0.15 + 7 * 0.60) / 1e6, rel=1e-12)


@pytest.mark.parametrize("live", [False, True], ids=["recorded", "live"])
def test_openlit_langgraph_agent_reads_as_one_step_per_node_run(live, tmp_path, open_engine):
    # OpenLit (1.45) traces the LangGraph agent on ChatOpenAI with its LangGraph and its
    # LangChain instrumentors, and each reports every node run as `invoke_agent agent`:
    # two siblings, one holding the model call, the other (LangGraph's) childless. They
    # are one step. The model call is one span (OpenLit suppresses its OpenAI span inside
    # LangChain's) with the provider's tokens; OpenLit's own price (gen_ai.usage.cost, 0
    # for a model its price list lacks) is not read. The graph's `create_agent` is a
    # trace of its own, set-up, no trial
    eng = open_engine(_lake("langgraph_openlit", tmp_path, live))
    trials = rows(eng, "SELECT * FROM trials")
    assert len(trials) == 1
    trial = trials[0]
    assert (trial["n_steps"], trial["n_llm"], trial["n_tool"], trial["input_tokens"], trial["output_tokens"],
            trial["models"], trial["error_class"], trial["counted"], trial["n_unknown_ops"]) == (
        6, 2, 1, 31, 12, ["gpt-4o-mini"], None, True, 0)
    assert trial["cost_usd"] == pytest.approx((31 * 0.15 + 12 * 0.60) / 1e6, rel=1e-12)
    st = rows(eng, "SELECT * FROM steps WHERE trace_id = ? ORDER BY seq", [trial["trace_id"]])
    assert [(s["step_kind"], s["name"], s["depth"], s["scope_name"]) for s in st] == [
        ("workflow", "invoke_workflow calc_graph", 1, "openlit.instrumentation.langgraph"),
        ("agent", "invoke_agent agent", 2, "openlit.instrumentation.langchain"),
        ("llm", "chat gpt-4o-mini", 3, "openlit.instrumentation.langchain"),
        ("tool", "execute_tool add", 2, "openlit.instrumentation.langchain"),
        ("agent", "invoke_agent agent", 2, "openlit.instrumentation.langchain"),
        ("respond", "chat gpt-4o-mini", 3, "openlit.instrumentation.langchain")]
    workflow, agent1, llm, tool, agent2, answer = st
    assert llm["step_parent_id"] == agent1["span_id"] and answer["step_parent_id"] == agent2["span_id"]
    assert {s["source_convention"] for s in st} == {"otel_genai"}
    # the tools node is no agent (OpenLit reports no span for it): the tool is the graph's
    assert [s["agent_name"] for s in st] == [None, "agent", "agent", None, "agent", "agent"]
    assert [(s["model"], s["provider"], s["input_tokens"], s["output_tokens"], s["cost_source"], s["finish_reasons"],
             s["requested_tools"]) for s in (llm, answer)] == [
        ("gpt-4o-mini", "openai", 11, 7, "price_table", '["tool_calls"]', True),
        ("gpt-4o-mini", "openai", 20, 5, "price_table", '["stop"]', False)]
    # its arguments are a Python repr (canonicalised), its result the ToolMessage's repr
    assert (tool["tool_name"], tool["tool_call_id"], tool["tool_args"], tool["output_text"]) == (
        "add", "call_1", '{"a":2,"b":3}', "content='5' name='add' tool_call_id='call_1'")
    assert answer["output_text"] == workflow["output_text"] == "The answer is 5"


# ----------------------------------------------------------------------------- Vercel AI SDK
def test_vercel_ai_sdk_tool_loop_reads_as_llm_tool_respond(tmp_path, open_engine):
    # The AI SDK's own spans (record_ai_sdk.mjs: ai 6 with its mock model, offline):
    # generateText, streamText and generateObject, one trace each. The doGenerate/doStream
    # span that asked for add(2, 3) ends with finish reason `tool-calls` (a hyphen) and was
    # read as the answer; ai.toolCall carries no GenAI key and was dropped
    eng = open_engine(write_otlp_json(tmp_path / "lake", FIXTURES / "vercel_ai_sdk.json"))
    trials = {t["trace_id"]: t for t in rows(eng, "SELECT * FROM trials")}
    assert len(trials) == 3
    runs = {}
    for trace_id in trials:
        st = rows(eng, "SELECT * FROM steps WHERE trace_id = ? ORDER BY seq", [trace_id])
        runs[st[0]["name"]] = (trials[trace_id], st)
    assert sorted(runs) == ["ai.generateObject", "ai.generateText", "ai.streamText"]
    for run in ("ai.generateText", "ai.streamText"):
        trial, st = runs[run]
        call = "doGenerate" if run == "ai.generateText" else "doStream"
        assert [(s["step_kind"], s["name"], s["depth"]) for s in st] == [
            ("workflow", run, 1), ("llm", f"{run}.{call}", 2), ("tool", "ai.toolCall", 2),
            ("respond", f"{run}.{call}", 2)]
        assert all(s["source_convention"] == "vercel_ai" for s in st)
        llm, tool, answer = st[1:]
        assert (llm["requested_tools"], llm["finish_reasons"]) == (True, '["tool-calls"]')
        assert (tool["tool_name"], tool["tool_call_id"], tool["tool_args"], tool["output_text"]) == (
            "add", "call_1", '{"a":2,"b":3}', "5")
        assert answer["output_text"] == "The answer is 5" and answer["requested_tools"] is False
        assert [(s["input_tokens"], s["output_tokens"], s["model"], s["provider"]) for s in st if s["llm_call"]] == [
            (11, 7, "gpt-4o-mini", "openai"), (20, 5, "gpt-4o-mini", "openai")]
        assert st[0]["output_text"] == "The answer is 5"
        assert (trial["n_steps"], trial["n_llm"], trial["n_tool"], trial["input_tokens"], trial["output_tokens"],
                trial["error_class"], trial["models"]) == (4, 2, 1, 31, 12, None, ["gpt-4o-mini"])
        assert trial["cost_usd"] == pytest.approx((31 * 0.15 + 12 * 0.60) / 1e6, rel=1e-12)
    trial, st = runs["ai.generateObject"]
    assert [(s["step_kind"], s["input_tokens"], s["output_tokens"], s["output_text"]) for s in st] == [
        ("workflow", None, None, '{"answer":5}'), ("respond", 14, 6, '{"answer":5}')]
    assert (trial["n_steps"], trial["n_llm"], trial["n_tool"], trial["error_class"]) == (2, 1, 0, None)
