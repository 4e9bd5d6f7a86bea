"""AutoGen adapter: native spans kept, chat spans with tokens added (one per model call,
also through clients that call other clients), tool args/results on the one native tool
span, group chats under a workflow span. ReplayChatCompletionClient."""

import pytest

from ._helpers import need  # noqa: E402

need("autogen_agentchat", "autogen_ext")

from ._helpers import jload, parent_of, query, root, run_script, spans, steps, trial_spans  # noqa: E402


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    lake = tmp_path_factory.mktemp("ag") / "lake"
    run_script("autogen_run.py", lake, "auto-first")
    return lake


def one(lake, scenario):
    (tr,) = trial_spans(lake, scenario)
    assert root(tr)["outcome"] == "pass"
    assert all((s["scenario"], s["version"], s["trial_index"]) == (scenario, "v1", 0) for s in tr)
    return tr


def test_multi_step(lake):
    tr = one(lake, "multi-step")
    assert steps(tr) == [
        ("invoke_workflow RoundRobinGroupChat", "assay.trial multi-step"),
        ("invoke_agent calc", "invoke_workflow RoundRobinGroupChat"),
        ("chat scripted-1", "invoke_agent calc"),
        ("execute_tool add", "invoke_agent calc"),
        ("chat scripted-1", "invoke_agent calc"),
        ("execute_tool add", "invoke_agent calc"),
        ("chat scripted-1", "invoke_agent calc"),
    ]
    chats = [s for s in tr if s["op"] == "chat"]
    assert [(s["input_tokens"], s["output_tokens"], s["provider"]) for s in chats] == [
        (11, 7, "replay"), (30, 9, "replay"), (20, 5, "replay")]
    assert jload(chats[0]["attributes"]["gen_ai.response.finish_reasons"]) == ["function_calls"]
    defs = jload(chats[0]["attributes"]["gen_ai.tool.definitions"])
    assert [d["name"] for d in defs] == ["add"]
    tools = [s for s in tr if s["op"] == "execute_tool"]
    # one span per tool call: AutoGen's own (scope autogen-core), completed with args and result
    assert [(s["scope_name"], s["tool_call_id"], jload(s["attributes"]["gen_ai.tool.call.arguments"]),
             s["attributes"]["gen_ai.tool.call.result"]) for s in tools] == [
        ("autogen-core", "call_1", {"a": 2, "b": 3}, "5"), ("autogen-core", "call_2", {"a": 5, "b": 10}, "15")]
    agent = tr[2]
    assert (agent["scope_name"], agent["agent_name"]) == ("autogen-core", "calc")
    # runtime messaging spans are off by default
    assert spans(lake, "name LIKE 'autogen %'") == []


def test_tool_error(lake):
    tr = one(lake, "tool-error")
    (bad,) = [s for s in tr if s["op"] == "execute_tool"]
    assert (bad["tool_name"], bad["status_code"], bad["error_type"], bad["tool_call_id"]) == ("refund", 2, "RuntimeError", "c1")
    assert jload(bad["attributes"]["gen_ai.tool.call.arguments"]) == {"order_id": "A1"}
    assert [n for n, _ in steps(tr)][-1] == "chat scripted-1"


def test_group_chat_of_two_agents(lake):
    tr = one(lake, "group-chat")
    assert steps(tr) == [
        ("invoke_workflow support_team", "assay.trial group-chat"),
        ("invoke_agent researcher", "invoke_workflow support_team"),
        ("chat scripted-1", "invoke_agent researcher"),
        ("execute_tool lookup_order", "invoke_agent researcher"),
        ("chat scripted-1", "invoke_agent researcher"),
        ("invoke_agent writer", "invoke_workflow support_team"),
        ("chat scripted-1", "invoke_agent writer"),
    ]
    assert tr[-1]["input_tokens"] == 40 and tr[-1]["output_tokens"] == 9


def test_single_agent_streamed(lake):
    tr = one(lake, "solo-stream")
    assert [n for n, _ in steps(tr)] == ["invoke_agent solo", "chat scripted-1", "execute_tool add", "chat scripted-1"]


def test_agent_used_as_a_tool_has_its_arguments_and_result(lake):
    # AgentTool runs through run_json_stream: its one span gets the arguments and the result
    # like any tool, and the inner agent nests under it
    tr = one(lake, "agent-tool")
    assert steps(tr) == [
        ("invoke_agent boss", "assay.trial agent-tool"),
        ("chat scripted-1", "invoke_agent boss"),
        ("execute_tool adder", "invoke_agent boss"),
        ("invoke_agent adder", "execute_tool adder"),
        ("chat scripted-1", "invoke_agent adder"),
        ("execute_tool add", "invoke_agent adder"),
        ("chat scripted-1", "invoke_agent adder"),
        ("chat scripted-1", "invoke_agent boss"),
    ]
    tools = [s for s in tr if s["op"] == "execute_tool"]
    assert [(s["tool_name"], s["tool_call_id"], jload(s["attributes"]["gen_ai.tool.call.arguments"]),
             s["attributes"]["gen_ai.tool.call.result"]) for s in tools] == [
        ("adder", "o1", {"task": "2+3"}, "adder: 5"), ("add", "i1", {"a": 2, "b": 3}, "5")]


def test_a_users_tool_class_calling_its_base_completes_the_one_span_once(lake):
    # the outermost run completes AutoGen's span: the result is the subclass's, not its base's;
    # the tool run directly (no run_json, no span of AutoGen's) sets nothing on the trial's
    tr = one(lake, "subclass-tool")
    (tool,) = [s for s in tr if s["op"] == "execute_tool"]
    assert (tool["scope_name"], tool["tool_call_id"], jload(tool["attributes"]["gen_ai.tool.call.arguments"]),
            tool["attributes"]["gen_ai.tool.call.result"], tool["attributes"]["assay.step.kind"]) == (
        "autogen-core", "l1", {"order_id": "C3"}, "ORDER C3: PAID", "tool")
    assert [s["name"] for s in tr if "gen_ai.tool.call.arguments" in s["attributes"]] == ["execute_tool lookup_order"]


def test_cancelled_tool_is_recorded_as_failed(lake):
    # the run timed out during the tool call: the tool's span ends (cancelled), it is not lost
    (tr,) = trial_spans(lake, "tool-cancelled")
    assert (root(tr)["outcome"], root(tr)["error_class"]) == ("fail", "timeout")
    (tool,) = [s for s in tr if s["op"] == "execute_tool"]
    assert (tool["tool_name"], tool["tool_call_id"], tool["status_code"], tool["error_type"]) == (
        "slow_refund", "z1", 2, "CancelledError")
    assert jload(tool["attributes"]["gen_ai.tool.call.arguments"]) == {"order_id": "A1"}


def test_stream_stopped_by_the_consumer_is_not_a_team_error(lake):
    tr = one(lake, "stream-break")
    (wf,) = [s for s in tr if s["name"] == "invoke_workflow RoundRobinGroupChat"]
    assert (wf["status_code"], wf["error_type"]) == (0, None)


def test_a_provider_outage_reraised_by_the_team_as_text_is_infrastructure(lake):
    """AutoGen's team re-raises an agent's error as RuntimeError(its text): the provider's
    connection error was lost and the trial counted as the agent's failure."""
    (tr,) = trial_spans(lake, "outage")
    assert (root(tr)["outcome"], root(tr)["error_class"]) == ("fail", "infrastructure")


def test_selector_group_chat_records_the_speaker_selection_call(lake):
    # the team's own client is no agent's client, and its class was defined after the agents:
    # its call is a chat step of the workflow, before the agent it picked
    tr = one(lake, "selector")
    assert steps(tr) == [
        ("invoke_workflow selector_team", "assay.trial selector"),
        ("chat scripted-1", "invoke_workflow selector_team"),
        ("invoke_agent researcher", "invoke_workflow selector_team"),
        ("chat scripted-1", "invoke_agent researcher"),
        ("invoke_agent writer", "invoke_workflow selector_team"),
        ("chat scripted-1", "invoke_agent writer"),
    ]
    assert [(s["input_tokens"], s["output_tokens"], s["provider"]) for s in tr if s["op"] == "chat"] == [
        (7, 1, "replay"), (30, 4, "replay"), (40, 9, "replay")]


def test_import_after_framework(tmp_path):
    lake = tmp_path / "lake"
    run_script("autogen_run.py", lake, "auto-last")
    (tr,) = trial_spans(lake, "group-chat")
    assert [n for n, _ in steps(tr)] == ["invoke_workflow support_team", "invoke_agent researcher", "chat scripted-1",
                                         "execute_tool lookup_order", "chat scripted-1", "invoke_agent writer",
                                         "chat scripted-1"]



# ------------------------------------------------------------------ clients calling clients
@pytest.fixture(scope="module")
def clients_lake(tmp_path_factory):
    lake = tmp_path_factory.mktemp("ag-clients") / "lake"
    run_script("autogen_clients_run.py", lake)
    return lake


def tool_then_answer(agent, scenario):
    return [(f"invoke_agent {agent}", f"assay.trial {scenario}"), ("chat scripted-1", f"invoke_agent {agent}"),
            ("execute_tool add", f"invoke_agent {agent}"), ("chat scripted-1", f"invoke_agent {agent}")]


def chats(tr):
    return [(s["provider"], s["input_tokens"], s["output_tokens"]) for s in tr if s["op"] == "chat"]


@pytest.mark.parametrize("scenario", ["subclass-super", "subclass-super-stream", "stream-via-create", "subclass-plain"])
def test_client_calling_its_base_class_is_one_chat_per_model_call(clients_lake, scenario):
    # a subclass's create / create_stream calling super(), or create_stream answering with
    # create: both layers are wrapped, the innermost one records; the provider is the base's
    tr = one(clients_lake, scenario)
    assert steps(tr) == tool_then_answer("calc", scenario)
    assert chats(tr) == [("replay", 11, 7), ("replay", 20, 5)]
    first, last = [s for s in tr if s["op"] == "chat"]
    assert [m["role"] for m in jload(first["attributes"]["gen_ai.input.messages"])] == ["system", "user"]
    assert jload(first["attributes"]["gen_ai.output.messages"])[0]["parts"][0]["name"] == "add"
    assert jload(last["attributes"]["gen_ai.output.messages"])[0]["parts"] == [{"type": "text", "content": "5"}]
    assert jload(last["attributes"]["gen_ai.response.finish_reasons"]) == ["stop"]


def test_client_delegating_to_another_records_the_inner_call(clients_lake):
    # ChatCompletionCache around a client (composition): the inner client's call is the
    # model call, with the inner client's provider, though no agent uses that client itself
    tr = one(clients_lake, "cache-miss")
    assert steps(tr) == tool_then_answer("cached", "cache-miss")
    assert chats(tr) == [("replay", 11, 7), ("replay", 20, 5)]


def test_client_answering_without_a_model_call_is_still_the_step(clients_lake):
    tr = one(clients_lake, "cache-hit")
    assert steps(tr) == tool_then_answer("cached", "cache-hit")
    # the cached result carries the original call's usage; a hit spent no tokens (nor money)
    assert chats(tr) == [("chatcompletioncache", 0, 0)] * 2
    assert all(s["attributes"].get("assay.cache_hit") == "true" for s in tr if s["op"] == "chat")


def test_client_retrying_makes_one_chat_per_attempt(clients_lake):
    tr = one(clients_lake, "retry")
    assert chats(tr) == [("replay", 11, 7), ("replay", 3, 0), ("replay", 20, 5)]


def test_failed_call_through_a_subclass_is_one_failed_chat(clients_lake):
    (tr,) = trial_spans(clients_lake, "subclass-error")
    assert root(tr)["outcome"] == "fail"
    (chat,) = [s for s in tr if s["op"] == "chat"]
    assert (chat["status_code"], chat["error_type"], chat["provider"]) == (2, "ValueError", "replay")


def test_concurrent_calls_each_get_their_chat(clients_lake):
    # two agents and two direct create calls of one client under asyncio.gather: none is
    # taken for a call nested in another, and each span has its own call's usage and output
    tr = one(clients_lake, "concurrent")
    got = sorted((parent_of(tr, s)["name"], s["input_tokens"],
                  jload(s["attributes"]["gen_ai.output.messages"])[0]["parts"][0]["content"])
                 for s in tr if s["op"] == "chat")
    assert got == [("assay.trial concurrent", 3, "x"), ("assay.trial concurrent", 4, "y"),
                   ("invoke_agent a", 1, "5"), ("invoke_agent b", 2, "5")]


def test_a_client_stream_stopped_by_its_reader_is_not_a_failed_call(clients_lake):
    tr = one(clients_lake, "stream-stopped")
    (chat,) = [s for s in tr if s["op"] == "chat"]
    assert (chat["name"], chat["status_code"], chat["error_type"]) == ("chat scripted-1", 0, None)


@pytest.mark.parametrize("scenario", [None, "solo"])
def test_single_agent_runs_outside_trials(tmp_path, scenario):
    # agent.run / agent.run_stream without a team or a trial: the first run of the process
    # kept no invoke_agent span (AutoGen's own span came before our pipeline was installed), so
    # its chat and tool spans were three traces of their own; under OTEL_ASSAY_SCENARIO each
    # run is an implicit trial, as a team run is
    lake = tmp_path / "lake"
    run_script("autogen_implicit.py", lake, env={"OTEL_ASSAY_SCENARIO": scenario})
    rows = spans(lake, "name NOT LIKE 'create_agent %'")
    traces: dict = {}
    for r in rows:
        traces.setdefault(r["trace_id"], []).append(r)
    top = "assay.trial solo" if scenario else None
    expected = {
        "first": [("chat scripted-1", "invoke_agent first"), ("execute_tool add", "invoke_agent first"),
                  ("chat scripted-1", "invoke_agent first")],
        "streamer": [("chat scripted-1", "invoke_agent streamer"), ("execute_tool add", "invoke_agent streamer"),
                     ("chat scripted-1", "invoke_agent streamer")],
        "broken": [("chat scripted-1", "invoke_agent broken")],
    }
    assert len(traces) == 3
    for tr, (name, inner) in zip(sorted(traces.values(), key=lambda t: t[0]["start_time_unix_nano"]), expected.items()):
        r = root(tr)
        if scenario:
            assert r["name"] == top and steps(tr) == [(f"invoke_agent {name}", top)] + inner
            assert (r["outcome"], r["error_class"]) == (("fail", "exception") if name == "broken" else ("pass", None))
            assert all(s["scenario"] == "solo" for s in tr)
        else:
            assert r["name"] == f"invoke_agent {name}" and steps(tr) == inner
    tools = [s for s in rows if s["op"] == "execute_tool"]
    assert [(s["tool_call_id"], s["attributes"]["gen_ai.tool.call.result"]) for s in tools] == [("f1", "5"), ("s1", "2")]


def test_agents_built_outside_trials_are_no_trials(tmp_path):
    # AutoGen records each agent's construction as a create_agent span: an agent built outside
    # any trial is a trace of that one span, which the trials view listed as an empty run (a
    # row without scenario in pass-rates), one per agent built
    lake = tmp_path / "lake"
    run_script("autogen_implicit.py", lake, env={"OTEL_ASSAY_SCENARIO": "solo"})
    assert spans(lake, "name LIKE 'create_agent %' AND parent_span_id IS NULL")  # the lake keeps them
    rows = query(lake, "SELECT scenario, outcome, error_class FROM trials ORDER BY start_time_unix_nano")
    assert rows == [{"scenario": "solo", "outcome": "pass", "error_class": None}] * 2 + [
        {"scenario": "solo", "outcome": "fail", "error_class": "exception"}]


@pytest.mark.parametrize("how", ["shutdown", "aclose"])
@pytest.mark.parametrize("kind", ["team", "agent", "streaming-agent"])
def test_a_stream_its_reader_stops_is_an_incomplete_trial_not_a_failed_one(tmp_path, kind, how):
    """A break out of run_stream() just before asyncio.run ends: the loop's close of the abandoned
    generator is cancelled, and the CancelledError failed the implicit trial as a timeout (and
    the workflow span, and the chat span of a model stream cut off with it). Stopping a stream is
    the reader's choice: the trial is incomplete (caller_stopped), no verdict."""
    lake = tmp_path / "lake"
    run_script("autogen_stopped_stream.py", lake, kind, how, env={"OTEL_ASSAY_SCENARIO": "stopped"})
    rows = spans(lake)
    assert [(s["name"], s["error_type"]) for s in rows if s["status_code"] == 2] == []
    assert [s["name"] for s in rows if s["op"] == "chat"] == ["chat scripted-1"]
    trials = query(lake, "SELECT outcome, error_class, counted FROM trials")
    assert trials == [{"outcome": None, "error_class": "caller-stopped", "counted": True}], trials
    (tr,) = trial_spans(lake, "stopped")
    assert root(tr)["attributes"]["assay.incomplete"] == "caller_stopped"
    if kind == "team":
        (wf,) = [s for s in tr if s["name"] == "invoke_workflow RoundRobinGroupChat"]
        assert wf["attributes"]["assay.incomplete"] == "caller_stopped"


def test_a_clients_model_name_comes_from_its_public_configuration():
    """The chat span is named after the model a client's component configuration names (as
    AutoGen's OpenAI, Azure and Anthropic clients keep it), else a public ``model``
    attribute, else the model family, else the client's class."""
    import warnings

    from autogen_ext.models.replay import ReplayChatCompletionClient
    from pydantic import BaseModel

    from otel_assay.capture.autogen import _model_name

    class ModelConfig(BaseModel):
        model: str

    class Configured(ReplayChatCompletionClient):
        component_config_schema = ModelConfig

        def _to_config(self) -> ModelConfig:
            return ModelConfig(model="gpt-test-1")

    class Attribute(ReplayChatCompletionClient):
        model = "attr-model"

    info = {"family": "fam-1", "vision": False, "function_calling": True, "json_output": False,
            "structured_output": False}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # naming a span warns about nothing
        names = [_model_name(Configured([])), _model_name(Attribute([], model_info=info)),
                 _model_name(ReplayChatCompletionClient([], model_info=info)), _model_name(object())]
    assert names == ["gpt-test-1", "attr-model", "fam-1", "object"]
