"""OpenAI Agents SDK adapter: Runner with the real OpenAIChatCompletionsModel against the
loopback scripted OpenAI server."""

import pytest

from ._helpers import need  # noqa: E402

need("agents", "openai")

from ._helpers import jload, root, run_script, spans, steps, trial_spans  # noqa: E402


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    lake = tmp_path_factory.mktemp("oa") / "lake"
    # no API key: the SDK's own uploader to OpenAI skips (offline); ours still records
    run_script("openai_agents_run.py", lake, env={"OPENAI_API_KEY": None})
    return lake


def one(lake, scenario):
    (tr,) = trial_spans(lake, scenario)
    assert root(tr)["outcome"] == "pass"
    assert all((s["scenario"], s["version"], s["trial_index"]) == (scenario, "v1", 0) for s in tr)
    return tr


def test_multi_step_with_guardrail(lake):
    tr = one(lake, "multi-step")
    assert steps(tr) == [
        ("invoke_workflow Agent workflow", "assay.trial multi-step"),
        ("invoke_agent calc", "invoke_workflow Agent workflow"),
        ("guardrail no_swearing", "invoke_agent calc"),
        ("chat fake-model-1", "invoke_agent calc"),
        ("execute_tool add", "invoke_agent calc"),
        ("chat fake-model-1", "invoke_agent calc"),
        ("execute_tool add", "invoke_agent calc"),
        ("chat fake-model-1", "invoke_agent calc"),
    ]
    chats = [s for s in tr if s["op"] == "chat"]
    assert [(s["input_tokens"], s["output_tokens"], s["model"], s["provider"]) for s in chats] == [
        (11, 7, "fake-model-1", "openai"), (30, 9, "fake-model-1", "openai"), (20, 5, "fake-model-1", "openai")]
    assert chats[0]["kind"] == 3
    out = jload(chats[0]["attributes"]["gen_ai.output.messages"])
    assert out[0]["parts"] == [{"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}]
    tools = [s for s in tr if s["op"] == "execute_tool"]
    assert [(s["tool_name"], s["tool_call_id"], jload(s["attributes"]["gen_ai.tool.call.arguments"]),
             s["attributes"]["gen_ai.tool.call.result"]) for s in tools] == [
        ("add", "call_1", {"a": 2, "b": 3}, "5"), ("add", "call_2", {"a": 5, "b": 10}, "15")]
    g = tr[3]
    assert g["attributes"]["assay.guardrail.triggered"] == "false"


def test_tool_error(lake):
    tr = one(lake, "tool-error")
    (bad,) = [s for s in tr if s["op"] == "execute_tool"]
    assert (bad["tool_name"], bad["status_code"], bad["error_type"], bad["tool_call_id"]) == ("refund", 2, "ToolError", "c1")
    assert bad["status_message"].startswith("Error running tool")


def test_handoff(lake):
    tr = one(lake, "handoff")
    assert steps(tr) == [
        ("invoke_workflow Agent workflow", "assay.trial handoff"),
        ("invoke_agent triage", "invoke_workflow Agent workflow"),
        ("chat fake-model-1", "invoke_agent triage"),
        ("handoff calc", "invoke_agent triage"),
        ("invoke_agent calc", "invoke_workflow Agent workflow"),
        ("chat fake-model-1", "invoke_agent calc"),
        ("execute_tool add", "invoke_agent calc"),
        ("chat fake-model-1", "invoke_agent calc"),
    ]
    h = tr[4]
    assert (h["attributes"]["assay.handoff.from_agent"], h["attributes"]["assay.handoff.to_agent"]) == ("triage", "calc")
    assert tr[3]["input_tokens"] == 15
    assert spans(lake, "scenario IS NULL") == []
