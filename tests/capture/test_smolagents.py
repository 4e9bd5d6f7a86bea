"""smolagents adapter: ToolCallingAgent, CodeAgent, managed agent, planning; one chat span per
model call, also through models that call other models (streaming on generate, subclasses,
wrappers). Scripted Model."""

import pytest

from ._helpers import need  # noqa: E402

need("smolagents")

from ._helpers import jload, parent_of, query, root, run_script, spans, steps, trial_spans  # noqa: E402


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    lake = tmp_path_factory.mktemp("smol") / "lake"
    run_script("smolagents_run.py", lake)
    return lake


def one(lake, scenario):
    (tr,) = trial_spans(lake, scenario)
    assert root(tr)["outcome"] == "pass"
    assert all(s["scenario"] == scenario and s["version"] == "v1" and s["trial_index"] == 0 for s in tr)
    return tr


def test_tool_calling_multi_step(lake):
    tr = one(lake, "multi-step")
    assert steps(tr) == [("invoke_agent calc", "assay.trial multi-step")] + [
        (n, "invoke_agent calc") for n in ("chat scripted-1", "execute_tool add", "chat scripted-1",
                                           "execute_tool add", "chat scripted-1", "execute_tool final_answer")]
    chats = [s for s in tr if s["op"] == "chat"]
    assert [(s["input_tokens"], s["output_tokens"], s["model"]) for s in chats] == [
        (11, 5, "scripted-1"), (21, 6, "scripted-1"), (31, 7, "scripted-1")]
    defs = jload(chats[0]["attributes"]["gen_ai.tool.definitions"])
    assert sorted(d["name"] for d in defs) == ["add", "final_answer"]
    tools = [s for s in tr if s["op"] == "execute_tool"]
    assert [(s["tool_name"], s["tool_call_id"], jload(s["attributes"]["gen_ai.tool.call.arguments"]),
             s["attributes"]["gen_ai.tool.call.result"], s["attributes"]["assay.step.kind"]) for s in tools] == [
        ("add", "scripted-1_call_1", {"a": 2, "b": 3}, "5", "tool"),
        ("add", "scripted-1_call_2", {"a": 5, "b": 10}, "15", "tool"),
        ("final_answer", "scripted-1_call_3", {"answer": "15"}, "15", "respond")]


def test_tool_error(lake):
    tr = one(lake, "tool-error")
    bad = next(s for s in tr if s["tool_name"] == "refund")
    assert (bad["status_code"], bad["error_type"], bad["tool_call_id"]) == (2, "RuntimeError", "scripted-1_call_1")
    assert [n for n, _ in steps(tr)] == ["invoke_agent support", "chat scripted-1", "execute_tool refund",
                                         "chat scripted-1", "execute_tool final_answer"]


def test_code_agent(lake):
    tr = one(lake, "code-agent")
    assert steps(tr) == [("invoke_agent coder", "assay.trial code-agent"), ("chat scripted-code", "invoke_agent coder"),
                         ("execute_tool add", "invoke_agent coder"), ("execute_tool final_answer", "invoke_agent coder")]
    add, final = tr[3], tr[4]
    assert jload(add["attributes"]["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 3}
    assert add["tool_call_id"] is None  # code has no call ids
    assert jload(final["attributes"]["gen_ai.tool.call.arguments"]) == {"answer": 5}
    assert final["attributes"]["assay.step.kind"] == "respond"


def test_managed_agent_nests_under_the_delegating_tool_call(lake):
    tr = one(lake, "multi-agent")
    assert steps(tr) == [
        ("invoke_agent manager", "assay.trial multi-agent"),
        ("chat scripted-boss", "invoke_agent manager"),
        ("execute_tool worker", "invoke_agent manager"),
        ("invoke_agent worker", "execute_tool worker"),
        ("chat scripted-worker", "invoke_agent worker"),
        ("execute_tool add", "invoke_agent worker"),
        ("chat scripted-worker", "invoke_agent worker"),
        ("execute_tool final_answer", "invoke_agent worker"),
        ("chat scripted-boss", "invoke_agent manager"),
        ("execute_tool final_answer", "invoke_agent manager"),
    ]
    delegate = tr[3]
    assert jload(delegate["attributes"]["gen_ai.tool.call.arguments"]) == {"task": "add 20 and 22"}
    assert delegate["tool_call_id"] == "scripted-boss_call_1"


def test_code_agent_delegating_to_a_managed_agent_is_a_tool_call(lake):
    # the delegation from a CodeAgent's code is a tool step too, as from a ToolCallingAgent
    tr = one(lake, "code-manager")
    assert steps(tr) == [
        ("invoke_agent manager", "assay.trial code-manager"),
        ("chat scripted-boss", "invoke_agent manager"),
        ("execute_tool worker", "invoke_agent manager"),
        ("invoke_agent worker", "execute_tool worker"),
        ("chat scripted-worker", "invoke_agent worker"),
        ("execute_tool add", "invoke_agent worker"),
        ("chat scripted-worker", "invoke_agent worker"),
        ("execute_tool final_answer", "invoke_agent worker"),
        ("execute_tool final_answer", "invoke_agent manager"),
    ]
    delegate = tr[3]
    assert jload(delegate["attributes"]["gen_ai.tool.call.arguments"]) == {"task": "add 20 and 22"}
    assert delegate["attributes"]["gen_ai.tool.call.result"].endswith("42")


def test_managed_code_agent_records_its_tool_calls(lake):
    # the managed CodeAgent runs inside the manager's tool call: its code's tool calls are
    # still steps (they were dropped as the manager's own call of the tool)
    tr = one(lake, "code-worker")
    assert steps(tr) == [
        ("invoke_agent manager", "assay.trial code-worker"),
        ("chat scripted-boss", "invoke_agent manager"),
        ("execute_tool coder", "invoke_agent manager"),
        ("invoke_agent coder", "execute_tool coder"),
        ("chat scripted-worker", "invoke_agent coder"),
        ("execute_tool add", "invoke_agent coder"),
        ("execute_tool final_answer", "invoke_agent coder"),
        ("chat scripted-boss", "invoke_agent manager"),
        ("execute_tool final_answer", "invoke_agent manager"),
    ]
    assert jload(tr[6]["attributes"]["gen_ai.tool.call.arguments"]) == {"a": 20, "b": 22}


def test_stream_stopped_by_the_consumer_is_not_an_agent_error(lake):
    tr = one(lake, "stream-break")
    assert [n for n, _ in steps(tr)] == ["invoke_agent calc", "chat scripted-1", "execute_tool add"]
    assert [(s["status_code"], s["error_type"]) for s in tr] == [(0, None)] * 4


def test_a_stream_kept_unread_past_its_trial_ends_with_the_trial(lake):
    # the model call is held until its step ends; the step never ends, the generator is
    # closed only at exit: the trial's end ends the run, and the model call is not lost
    tr = one(lake, "stream-kept")
    assert [n for n, _ in steps(tr)] == ["invoke_agent calc", "chat scripted-1"]
    assert [(s["status_code"], s["error_type"]) for s in tr] == [(0, None)] * 3
    assert next(s for s in tr if s["op"] == "chat")["input_tokens"] == 11


@pytest.mark.parametrize("scenario,stopped", [("stream-break-plan", "plan calc"),
                                              ("stream-break-deltas", "chat scripted-1")])
def test_a_stream_stopped_during_a_plan_or_model_stream_fails_no_step(lake, scenario, stopped):
    # the consumer stops reading while the planning step or the model's stream is open: the
    # step it cut short ends, without the GeneratorExit recorded as its error
    tr = one(lake, scenario)
    assert stopped in [n for n, _ in steps(tr)]
    assert [(s["name"], s["status_code"], s["error_type"]) for s in tr if s["status_code"] != 0] == []


def test_planning_is_a_reason_step(lake):
    tr = one(lake, "planning")
    assert steps(tr)[:3] == [("invoke_agent planner", "assay.trial planning"), ("plan planner", "invoke_agent planner"),
                             ("chat scripted-1", "plan planner")]
    plan = tr[2]
    assert (plan["op"], plan["attributes"]["assay.step.kind"], plan["input_tokens"]) == ("plan", "reason", 11)
    assert "add 1 and 1" in plan["attributes"]["gen_ai.output.messages"]
    assert spans(lake, "scenario IS NULL") == []


# ------------------------------------------------------------------ models calling models
def add_then_answer(scenario, model="scripted-1"):
    return [("invoke_agent calc", f"assay.trial {scenario}")] + [
        (n, "invoke_agent calc") for n in (f"chat {model}", "execute_tool add", f"chat {model}", "execute_tool final_answer")]


@pytest.mark.parametrize("scenario", ["replanning", "replanning-stream"])
def test_planning_at_every_step_is_one_reason_step_each(lake, scenario):
    # a plan span is opened by the model call that writes the plan and ended by smolagents'
    # PlanningStep: the action steps' model calls between plans are the agent's, not a plan's
    tr = one(lake, scenario)
    by_id = {s["span_id"]: s for s in tr}
    plans = [s for s in tr if s["name"] == "plan replanner"]
    assert len(plans) == 2
    chats = [s for s in tr if s["op"] == "chat"]
    assert len(chats) == 4
    under = [by_id[c["parent_span_id"]]["name"] for c in chats]  # spans come in order of start
    assert under == ["plan replanner", "invoke_agent replanner"] * 2
    assert all(p["attributes"]["assay.step.kind"] == "reason" and p["status_code"] == 0 for p in plans)
    assert ["answer 2" in p["attributes"]["gen_ai.output.messages"] for p in plans] == [False, True]


def chats(tr):
    return [(s["model"], s["provider"], s["input_tokens"], s["output_tokens"]) for s in tr if s["op"] == "chat"]


@pytest.mark.parametrize("scenario, provider", [
    ("stream-native", "nativestreammodel"),   # a model that streams natively
    ("subclass-super", "loggingmodel"),       # a subclass calling its base class
    # composition: the inner model's call is the model call (its name, its usage), though
    # no agent uses that model itself
    ("wrapper", "scriptedmodel"),
])
def test_one_chat_per_model_call(lake, scenario, provider):
    tr = one(lake, scenario)
    assert steps(tr) == add_then_answer(scenario)
    assert chats(tr) == [("scripted-1", provider, 11, 5), ("scripted-1", provider, 21, 6)]


def test_stream_built_on_generate_is_one_chat_per_model_call(lake):
    # generate_stream answering with self.generate: both are wrapped, the innermost records,
    # so the span has the whole answer (tool calls, finish reason), not only the streamed text
    tr = one(lake, "stream-via-generate")
    assert steps(tr) == add_then_answer("stream-via-generate")
    assert chats(tr) == [("scripted-1", "streamviageneratemodel", 11, 5), ("scripted-1", "streamviageneratemodel", 21, 6)]
    first = next(s for s in tr if s["op"] == "chat")
    assert jload(first["attributes"]["gen_ai.response.finish_reasons"]) == ["tool_calls"]
    assert jload(first["attributes"]["gen_ai.output.messages"])[0]["parts"][-1]["name"] == "add"
    assert [m["role"] for m in jload(first["attributes"]["gen_ai.input.messages"])] == ["system", "user"]


def test_model_used_alone_and_through_a_wrapper_is_one_chat_per_call(lake):
    tr = one(lake, "wrapper-shared")
    assert [n for n, _ in steps(tr)] == [n for n, _ in add_then_answer("wrapper-shared")] * 2
    assert [c[3] for c in chats(tr)] == [5, 6, 7, 8]
    assert {c[:2] for c in chats(tr)} == {("scripted-1", "scriptedmodel")}


def test_model_answering_without_a_model_call_is_still_the_step(lake):
    assert [c[:2] for c in chats(one(lake, "cache-miss"))] == [("scripted-1", "scriptedmodel")] * 2
    tr = one(lake, "cache-hit")
    assert steps(tr) == add_then_answer("cache-hit", model="cache")
    assert chats(tr) == [("cache", "cachingmodel", 11, 5), ("cache", "cachingmodel", 21, 6)]


def test_failed_call_through_a_subclass_is_one_failed_chat(lake):
    (tr,) = trial_spans(lake, "subclass-error")
    assert root(tr)["outcome"] == "fail"
    (chat,) = [s for s in tr if s["op"] == "chat"]
    assert (chat["status_code"], chat["error_type"], chat["name"]) == (2, "RuntimeError", "chat scripted-1")


@pytest.mark.parametrize("scenario, error_class", [("model-unreachable", "infrastructure"),
                                                    ("model-timeout", "timeout")])
def test_provider_error_wrapped_by_the_agent_classifies_the_trial(lake, scenario, error_class):
    # what escapes run() is smolagents' AgentGenerationError, raised from the model's error:
    # an outage is infrastructure (out of the pass rate), not an agent failure
    (tr,) = trial_spans(lake, scenario)
    r = root(tr)
    assert (r["outcome"], r["error_class"], r["error_type"]) == (
        "fail", error_class, "smolagents.utils.AgentGenerationError")
    (trial,) = query(lake, "SELECT error_class, counted FROM trials WHERE scenario = ?", [scenario])
    assert trial == {"error_class": error_class, "counted": False}


def test_parallel_managed_agents_each_get_their_chats(lake):
    # two workers run in threads at the same time: neither's call is taken for a nested one
    tr = one(lake, "parallel-workers")
    got = sorted((parent_of(tr, s)["name"], s["model"], s["input_tokens"]) for s in tr if s["op"] == "chat")
    assert got == [("invoke_agent boss", "scripted-boss", 11), ("invoke_agent boss", "scripted-boss", 21),
                   ("invoke_agent worker1", "scripted-w1", 11), ("invoke_agent worker1", "scripted-w1", 21),
                   ("invoke_agent worker2", "scripted-w2", 11), ("invoke_agent worker2", "scripted-w2", 21)]


# ------------------------------------------------------------------ steps that fail while the run goes on
def failed_steps(lake, scenario):
    """(kind, name, error type, call id, arguments) of the failed steps, from the `steps` view."""
    return [tuple(r.values()) for r in query(
        lake, "SELECT s.step_kind, s.name, s.error_type, s.tool_call_id, s.tool_args FROM steps s "
              "JOIN trials t USING (trace_id) WHERE t.scenario = ? AND s.status = 'error' ORDER BY s.seq", [scenario])]


def test_code_that_raises_is_a_failed_code_execution_step(lake):
    # smolagents catches the AgentExecutionError, records it on the ActionStep and asks the
    # model again: the code action (smolagents' own tool call "python_interpreter") failed
    tr = one(lake, "code-error")
    assert [n for n, _ in steps(tr)] == ["invoke_agent coder", "chat scripted-code", "execute_tool python_interpreter",
                                         "chat scripted-code", "execute_tool final_answer"]
    assert failed_steps(lake, "code-error") == [
        ("tool", "execute_tool python_interpreter", "smolagents.utils.AgentExecutionError", "call_1", '"x = 1 / 0"')]
    code = next(s for s in tr if s["tool_name"] == "python_interpreter")
    assert "ZeroDivisionError" in code["status_message"]
    assert code["attributes"]["assay.step.kind"] == "tool"


def test_code_calling_a_tool_that_raises_fails_that_tool_only(lake):
    # the execution error smolagents reports is the tool's: one failed step, not two
    one(lake, "code-tool-error")
    assert failed_steps(lake, "code-tool-error") == [("tool", "execute_tool refund", "RuntimeError", None,
                                                      '{"order_id":"A1"}')]


@pytest.mark.parametrize("scenario,model", [("parse-error", "scripted-1"), ("code-parse-error", "scripted-code")])
def test_an_answer_that_cannot_be_parsed_is_a_failed_llm_step(lake, scenario, model):
    # AgentParsingError: the model's answer holds no tool call (no code block) the agent can
    # use; the model call keeps its tokens and is the step that failed
    one(lake, scenario)
    assert failed_steps(lake, scenario) == [("llm", f"chat {model}", "smolagents.utils.AgentParsingError", None, None)]
    (trial,) = query(lake, "SELECT n_llm, n_errors, input_tokens FROM trials WHERE scenario = ?", [scenario])
    assert trial == {"n_llm": 2, "n_errors": 1, "input_tokens": 11 + 21}


def test_reaching_max_steps_fails_the_agent_step(lake):
    # run() returns the answer the model writes once out of steps; the caller's check may
    # accept it (an explicit trial keeps its outcome), the agent step did not finish its task
    (tr,) = trial_spans(lake, "max-steps")
    assert root(tr)["outcome"] == "pass"
    assert failed_steps(lake, "max-steps") == [("agent", "invoke_agent calc", "smolagents.utils.AgentMaxStepsError",
                                                None, None)]
    assert [n for n, _ in steps(tr)] == ["invoke_agent calc"] + ["chat scripted-1", "execute_tool add"] * 2 + [
        "chat scripted-1"]


def test_an_implicit_trial_that_reached_max_steps_is_a_counted_failure(tmp_path):
    lake = tmp_path / "lake"
    run_script("smolagents_implicit.py", lake, env={"OTEL_ASSAY_SCENARIO": "calc-task"})
    rows = query(lake, "SELECT outcome, error_class, counted, passed FROM trials ORDER BY trial_index")
    assert [tuple(r.values()) for r in rows] == [("pass", None, True, True),
                                                 ("fail", "max-steps", True, False),   # run()
                                                 ("fail", "max-steps", True, False)]   # run(stream=True)


def test_final_answer_is_the_respond_step_not_a_tool(lake):
    # the adapter marks final_answer assay.step.kind=respond: it is the answer, not a tool
    # call (counted as one, every smolagents run had one tool call too many and no answer)
    (tr,) = trial_spans(lake, "multi-step")
    tid = tr[0]["trace_id"]
    st = query(lake, "SELECT step_kind, tool_name, output_text, llm_call FROM steps WHERE trace_id = ? ORDER BY seq",
               [tid])
    assert [(s["step_kind"], s["tool_name"]) for s in st] == [
        ("agent", None), ("llm", None), ("tool", "add"), ("llm", None), ("tool", "add"), ("llm", None),
        ("respond", None)]
    assert st[-1]["output_text"] == "15" and not st[-1]["llm_call"]
    (t,) = query(lake, "SELECT n_steps, n_llm, n_tool, input_tokens, output_tokens FROM trials WHERE trace_id = ?",
                 [tid])
    assert t == {"n_steps": 7, "n_llm": 3, "n_tool": 2, "input_tokens": 11 + 21 + 31, "output_tokens": 5 + 6 + 7}
