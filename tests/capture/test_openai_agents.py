"""OpenAI Agents SDK adapter: Runner with the real OpenAIChatCompletionsModel against the
loopback scripted OpenAI server."""

import pytest

from ._helpers import need  # noqa: E402

need("agents", "openai")

from ._helpers import jload, root, run_script, spans, steps, trial_spans  # noqa: E402


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    lake = tmp_path_factory.mktemp("oa") / "lake"
    # the script replaces the SDK's processors (set_trace_processors([]), as applications do
    # to drop the upload to OpenAI): ours is kept, or none of these tests would see a step.
    # openai_agents_implicit.py runs with the SDK's own processors (no API key: its uploader skips)
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
    # (the SDK trace opened outside the in-sdk-trace trials is no trial's)
    assert spans(lake, "scenario IS NULL AND name <> 'invoke_workflow Eval run'") == []


@pytest.mark.parametrize("scenario", ["streamed", "responses", "responses-streamed"])
def test_streamed_and_responses_api_chats_have_model_output_and_tool_call_ids(lake, scenario):
    # a streamed generation and a Responses API response span record the answer as a
    # Response object (function_call items), not as chat messages: the model, the tool call
    # (hence the tool step's call id) and the finish reason come from it
    tr = one(lake, scenario)
    assert [n for n, _ in steps(tr)] == ["invoke_workflow Agent workflow", "invoke_agent calc", "chat fake-model-1",
                                         "execute_tool add", "chat fake-model-1"]
    chats = [s for s in tr if s["op"] == "chat"]
    assert [(s["model"], s["input_tokens"], s["output_tokens"],
             jload(s["attributes"]["gen_ai.response.finish_reasons"])) for s in chats] == [
        ("fake-model-1", 11, 7, ["tool_calls"]), ("fake-model-1", 20, 5, ["stop"])]
    out = [jload(s["attributes"]["gen_ai.output.messages"]) for s in chats]
    assert out[0][0]["parts"] == [{"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}]
    assert out[1][0]["parts"] == [{"type": "text", "content": "5"}]
    assert jload(chats[1]["attributes"]["gen_ai.input.messages"])[-1] == {
        "role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "result": "5"}]}
    (tool,) = [s for s in tr if s["op"] == "execute_tool"]
    assert (tool["tool_call_id"], jload(tool["attributes"]["gen_ai.tool.call.arguments"]),
            tool["attributes"]["gen_ai.tool.call.result"]) == ("call_1", {"a": 2, "b": 3}, "5")


def test_spans_made_by_a_tool_nest_under_its_tool_call(lake):
    tr = one(lake, "step-in-tool")
    assert steps(tr) == [
        ("invoke_workflow Agent workflow", "assay.trial step-in-tool"),
        ("invoke_agent support", "invoke_workflow Agent workflow"),
        ("chat fake-model-1", "invoke_agent support"),
        ("execute_tool lookup_order", "invoke_agent support"),
        ("execute_tool orders_db", "execute_tool lookup_order"),
        ("chat fake-model-1", "invoke_agent support"),
    ]


def test_a_tool_cut_off_by_a_timeout_is_a_failed_step(lake):
    # the SDK ends the function span of a cancelled tool without an error
    (tr,) = trial_spans(lake, "tool-timeout")
    assert (root(tr)["outcome"], root(tr)["error_class"]) == ("fail", "timeout")
    (tool,) = [s for s in tr if s["op"] == "execute_tool"]
    assert (tool["tool_name"], tool["status_code"], tool["error_type"]) == (
        "slow_refund", 2, "asyncio.exceptions.CancelledError")
    assert [s["status_code"] for s in tr if s["op"] == "chat"] == [0]


def test_trials_inside_an_sdk_trace_keep_their_steps(lake):
    # `with agents.trace("Eval run"):` around the trials: each trial is its own trace holding
    # its run's steps, not an empty run next to one outer trace holding every trial's steps
    trials = trial_spans(lake, "in-sdk-trace")
    assert len(trials) == 2
    for i, tr in enumerate(trials):
        assert root(tr)["outcome"] == "pass"
        assert steps(tr) == [
            ("invoke_agent calc", "assay.trial in-sdk-trace"),
            ("chat fake-model-1", "invoke_agent calc"),
            ("execute_tool add", "invoke_agent calc"),
            ("chat fake-model-1", "invoke_agent calc"),
        ]
        (tool,) = [s for s in tr if s["op"] == "execute_tool"]
        assert (tool["tool_call_id"], jload(tool["attributes"]["gen_ai.tool.call.arguments"])) == ("e1", {"a": i, "b": 1})
    (outer,) = spans(lake, "name = 'invoke_workflow Eval run'")
    assert spans(lake, "trace_id = ? AND span_id <> ?", [outer["trace_id"], outer["span_id"]]) == []


def test_implicit_trial_fails_when_the_run_raises(tmp_path):
    # OTEL_ASSAY_SCENARIO without otel_assay.trial: the SDK trace has no error of its own, yet
    # a run that raised (max turns, a guardrail tripwire) is a failed trial, not a passed one
    lake = tmp_path / "lake"
    p = run_script("openai_agents_implicit.py", lake, env={"OPENAI_API_KEY": None, "OTEL_ASSAY_SCENARIO": "calc-task"})
    # set_tracing_disabled(True) at the end: SDK runs would record no step, and a warning says so
    assert p.stderr.count("OpenAI Agents SDK tracing is disabled (set_tracing_disabled(True))") == 1
    rows = spans(lake, "name = 'assay.trial calc-task'")
    assert [(r["outcome"], r["error_class"], r["error_type"]) for r in rows] == [
        ("pass", None, None),
        ("fail", "exception", "agents.exceptions.MaxTurnsExceeded"),
        ("fail", "exception", "agents.exceptions.InputGuardrailTripwireTriggered"),
        ("pass", None, None),
        ("fail", "exception", "agents.exceptions.MaxTurnsExceeded"),  # streamed: raised to the reader only
        (None, "caller_stopped", None),  # streamed, stopped by the caller (cancel()): incomplete, no verdict
        ("fail", "exception", "agents.exceptions.MaxTurnsExceeded"),
        (None, "caller_stopped", None),  # streamed, the caller broke out of stream_events() without cancel()
    ]
    failed = spans(lake, "name = 'invoke_workflow Agent workflow' AND status_code = 2")
    assert [r["error_type"] for r in failed] == ["agents.exceptions.MaxTurnsExceeded",
                                                 "agents.exceptions.InputGuardrailTripwireTriggered",
                                                 "agents.exceptions.MaxTurnsExceeded",
                                                 "agents.exceptions.MaxTurnsExceeded"]
    # the two streamed runs the caller stopped are marked as such, and only they
    stopped = spans(lake, "name = 'invoke_workflow Agent workflow' AND attributes['assay.incomplete'] IS NOT NULL")
    assert [(r["trial_index"], r["attributes"]["assay.incomplete"], r["status_code"]) for r in stopped] == [
        (5, "caller_stopped", 0), (7, "caller_stopped", 0)]


def test_streamed_runs_fail_as_their_reader_is_told(tmp_path):
    # a streamed run finishes its SDK trace before its reader learns the outcome
    lake = tmp_path / "lake"
    p = run_script("openai_agents_streamed.py", lake, env={"OPENAI_API_KEY": None, "OTEL_ASSAY_SCENARIO": "s"})
    # disabled before otel-assay was imported: the first run that records nothing says so, once
    assert p.stderr.count("OpenAI Agents SDK tracing is disabled (set_tracing_disabled(True))") == 1
    rows = spans(lake, "name = 'assay.trial s'")
    assert [(r["outcome"], r["error_type"]) for r in rows] == [
        ("fail", "agents.exceptions.InputGuardrailTripwireTriggered"),
        ("pass", None),  # past max turns, answered by the max-turns error handler
    ]
    workflows = spans(lake, "name = 'invoke_workflow Agent workflow'")
    assert [(w["trial_index"], w["status_code"], w["error_type"]) for w in workflows] == [
        (0, 2, "agents.exceptions.InputGuardrailTripwireTriggered"), (1, 0, None)]
