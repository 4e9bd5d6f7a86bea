"""AutoGen adapter: native spans kept, chat spans with tokens added, tool args/results on
the one native tool span, group chats under a workflow span. ReplayChatCompletionClient."""

import pytest

from ._helpers import need  # noqa: E402

need("autogen_agentchat", "autogen_ext")

from ._helpers import jload, root, run_script, spans, steps, trial_spans  # noqa: E402


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


def test_import_after_framework(tmp_path):
    lake = tmp_path / "lake"
    run_script("autogen_run.py", lake, "auto-last")
    (tr,) = trial_spans(lake, "group-chat")
    assert [n for n, _ in steps(tr)] == ["invoke_workflow support_team", "invoke_agent researcher", "chat scripted-1",
                                         "execute_tool lookup_order", "chat scripted-1", "invoke_agent writer",
                                         "chat scripted-1"]
