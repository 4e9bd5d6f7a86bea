"""CrewAI adapter: event-bus listeners; spans from event timestamps and parent links.
Runs in the crewai environment (crewai needs openai<3; see docs/testing.md)."""

import pytest

from ._helpers import need  # noqa: E402

need("crewai")

from ._helpers import jload, root, run_script, spans, steps, trial_spans  # noqa: E402


RUN = {}


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    lake = tmp_path_factory.mktemp("crew") / "lake"
    RUN["stdout"] = run_script("crewai_run.py", lake, "auto-first").stdout
    return lake


def one(lake, scenario):
    (tr,) = trial_spans(lake, scenario)
    assert root(tr)["outcome"] == "pass"
    assert all((s["scenario"], s["version"], s["trial_index"]) == (scenario, "v1", 0) for s in tr)
    return tr


def test_multi_step(lake):
    tr = one(lake, "multi-step")
    assert steps(tr) == [("invoke_workflow calc_crew", "assay.trial multi-step"),
                         ("invoke_agent calculator", "invoke_workflow calc_crew")] + [
        (n, "invoke_agent calculator") for n in ("chat scripted-1", "execute_tool add", "chat scripted-1",
                                                 "execute_tool add", "chat scripted-1")]
    chats = [s for s in tr if s["op"] == "chat"]
    assert [(s["input_tokens"], s["output_tokens"], s["model"]) for s in chats] == [
        (11, 7, "scripted-1"), (21, 8, "scripted-1"), (31, 9, "scripted-1")]
    tools = [s for s in tr if s["op"] == "execute_tool"]
    assert [(jload(s["attributes"]["gen_ai.tool.call.arguments"]), s["attributes"]["gen_ai.tool.call.result"])
            for s in tools] == [({"a": 2, "b": 3}, "5"), ({"a": 5, "b": 10}, "15")]
    # spans come from event timestamps: children inside their parents
    by = {s["span_id"]: s for s in tr}
    for s in tr[1:]:
        p = by[s["parent_span_id"]]
        assert p["start_time_unix_nano"] <= s["start_time_unix_nano"]


def test_tool_error(lake):
    tr = one(lake, "tool-error")
    bad = [s for s in tr if s["op"] == "execute_tool"]
    assert len(bad) == 3  # CrewAI's ToolUsage retries a failing tool: each attempt is a step
    assert {(s["tool_name"], s["status_code"], s["error_type"]) for s in bad} == {("refund", 2, "RuntimeError")}
    assert [n for n, _ in steps(tr)][-1] == "chat scripted-1"


def test_delegation_nests_the_coworker(lake):
    tr = one(lake, "delegation")
    assert steps(tr) == [
        ("invoke_workflow delegating_crew", "assay.trial delegation"),
        ("invoke_agent manager", "invoke_workflow delegating_crew"),
        ("chat scripted-boss", "invoke_agent manager"),
        ("execute_tool Delegate work to coworker", "invoke_agent manager"),
        ("invoke_agent researcher", "execute_tool Delegate work to coworker"),
        ("chat scripted-research", "invoke_agent researcher"),
        ("execute_tool add", "invoke_agent researcher"),
        ("chat scripted-research", "invoke_agent researcher"),
        ("chat scripted-boss", "invoke_agent manager"),
    ]
    d = tr[4]
    assert jload(d["attributes"]["gen_ai.tool.call.arguments"])["coworker"] == "researcher"
    assert spans(lake, "scenario IS NULL") == []


def test_native_tool_calls_are_tool_call_parts(lake):
    tr = one(lake, "native-tools")
    chats = [s for s in tr if s["op"] == "chat"]
    assert len(chats) == 4
    # the model's tool calls are recorded as tool calls, not as their JSON text
    assert jload(chats[0]["attributes"]["gen_ai.output.messages"]) == [{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}]}]
    assert jload(chats[-1]["attributes"]["gen_ai.output.messages"])[0]["parts"] == [{"type": "text", "content": "5"}]


def test_tool_reporting_failure_is_a_failed_step(lake):
    tr = one(lake, "native-tools")
    # a tool that ran but reported failure (returned a ToolFailure; an unknown tool) is a failed step
    tools = [(s["tool_name"], s["status_code"] == 2, s["error_type"]) for s in tr if s["op"] == "execute_tool"]
    assert tools == [("add", False, None), ("post", True, "ToolFailure.tool_reported"),
                     ("nosuch", True, "ToolFailure.unknown_tool")]
    post = next(s for s in tr if s["tool_name"] == "post")
    assert post["status_message"] == "channel_not_found"


def test_agent_kicked_off_without_a_crew_is_an_agent_step(lake):
    tr = one(lake, "agent-kickoff")
    assert steps(tr) == [("invoke_agent solo", "assay.trial agent-kickoff")] + [
        (n, "invoke_agent solo") for n in ("chat scripted-1", "execute_tool add", "chat scripted-1")]


def test_ended_events_are_forgotten_without_a_flush(lake):
    # the events of the first crew were forgotten while the second ran: the listener holds
    # one crew's events, not one more crew's for every kickoff of the process
    held = next(line for line in RUN["stdout"].splitlines() if line.startswith("HELD"))
    first, second = eval(held[5:])
    assert 0 < second <= first, held
    traces = trial_spans(lake, "long-running")
    assert [[s["name"] for s in tr] for tr in traces] == [
        ["assay.trial long-running", "invoke_workflow echo_crew", "invoke_agent echo", "chat scripted-1"]] * 2


def test_flush_while_a_crew_runs_loses_nothing(lake):
    tr = one(lake, "flush-while-running")
    assert [n for n, _ in steps(tr)] == ["invoke_workflow slow_crew", "invoke_agent slow", "chat scripted-1",
                                         "execute_tool slow_add", "chat scripted-1"]
    # and once everything has run, a flush leaves nothing behind
    left = next(line for line in RUN["stdout"].splitlines() if line.startswith("LEFT"))
    assert left == "LEFT 0 0 0"


def test_import_after_framework(tmp_path):
    lake = tmp_path / "lake"
    run_script("crewai_run.py", lake, "auto-last")
    (tr,) = trial_spans(lake, "multi-step")
    assert [n for n, _ in steps(tr)] == ["invoke_workflow calc_crew", "invoke_agent calculator", "chat scripted-1",
                                         "execute_tool add", "chat scripted-1", "execute_tool add", "chat scripted-1"]


def test_a_crew_kicked_off_outside_a_trial_is_an_implicit_trial(tmp_path):
    """OTEL_ASSAY_SCENARIO made every other framework's top-level run a trial, but a CrewAI
    crew was none: its spans formed a trace without a scenario, invisible to the gate."""
    from ._helpers import query

    lake = tmp_path / "lake"
    p = run_script("crewai_implicit.py", lake, env={"OTEL_ASSAY_SCENARIO": "crew-calc", "OTEL_ASSAY_VERSION": "v3"})
    assert "RESULT 5" in p.stdout and "RAISED" in p.stdout and "done" in p.stdout
    rows = query(lake, "SELECT scenario, version, trial_index, outcome, error_class, n_llm, n_tool FROM trials "
                       "ORDER BY start_time_unix_nano")
    assert [tuple(r.values()) for r in rows] == [
        ("crew-calc", "v3", 0, "pass", None, 2, 1),
        ("crew-calc", "v3", 1, "fail", "infrastructure", 0, 0),   # the model provider was down
        ("explicit", "v1", 0, "pass", None, 1, 0),                # inside a trial: no second one
    ]
    tr = trial_spans(lake, "crew-calc")[0]
    assert steps(tr)[:2] == [("invoke_workflow calc_crew", "assay.trial crew-calc"),
                             ("invoke_agent calculator", "invoke_workflow calc_crew")]
    r = root(tr)
    assert r["attributes"].get("assay.trial.implicit") == "true"
    # the trial encloses its crew (whose span is built from the events' timestamps)
    (t0, t1), (c0, c1) = [query(lake, "SELECT start_time_unix_nano, start_time_unix_nano + duration_ns AS e FROM spans "
                                      "WHERE span_id = ?", [s["span_id"]])[0].values()
                          for s in (r, next(s for s in tr if s["name"] == "invoke_workflow calc_crew"))]
    assert t0 <= c0 and c1 <= t1
