"""LangGraph / LangChain adapter: real graphs, scripted offline model, real lake, real DuckDB; one
chat span per model call, also through chat models that call other chat models."""

import json

import pytest

from ._helpers import need  # noqa: E402

need("langgraph")

from ._helpers import jload, parent_of, root, run_script, spans, steps, trial_spans  # noqa: E402


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    lake = tmp_path_factory.mktemp("lg") / "lake"
    p = run_script("langgraph_run.py", lake, "auto-first")
    assert "re-raised: refund service down for B2" in p.stdout
    return lake


def one(lake, scenario):
    traces = trial_spans(lake, scenario)
    assert len(traces) == 1
    return traces[0]


def test_multi_step_sequence_tokens_and_args(lake):
    tr = one(lake, "multi-step")
    assert steps(tr) == [
        ("invoke_agent calc", "assay.trial multi-step"),
        ("chat scripted-1", "invoke_agent calc"),
        ("execute_tool add", "invoke_agent calc"),
        ("chat scripted-1", "invoke_agent calc"),
        ("execute_tool add", "invoke_agent calc"),
        ("chat scripted-1", "invoke_agent calc"),
    ]
    r = root(tr)
    assert (r["scenario"], r["version"], r["trial_index"], r["outcome"], r["score"]) == ("multi-step", "v1", 0, "pass", 1.0)
    chats = [s for s in tr if s["op"] == "chat"]
    assert [(s["input_tokens"], s["output_tokens"]) for s in chats] == [(11, 7), (30, 9), (20, 5)]
    assert {s["model"] for s in chats} == {"scripted-1"}
    assert chats[0]["kind"] == 3  # CLIENT (OTLP numbering)
    assert jload(chats[0]["attributes"]["gen_ai.response.finish_reasons"]) == ["tool_calls"]
    assert jload(chats[-1]["attributes"]["gen_ai.response.finish_reasons"]) == ["stop"]
    defs = jload(chats[0]["attributes"]["gen_ai.tool.definitions"])
    assert [d["function"]["name"] for d in defs] == ["add"]
    out = jload(chats[0]["attributes"]["gen_ai.output.messages"])
    assert out[0]["parts"][-1] == {"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}
    tools = [s for s in tr if s["op"] == "execute_tool"]
    assert [(s["tool_name"], s["tool_call_id"], jload(s["attributes"]["gen_ai.tool.call.arguments"]),
             s["attributes"]["gen_ai.tool.call.result"]) for s in tools] == [
        ("add", "call_1", {"a": 2, "b": 3}, "5"), ("add", "call_2", {"a": 5, "b": 10}, "15")]
    assert {s["attributes"]["assay.graph.node"] for s in tools} == {"tools"}
    # assay.* copied onto every span of the trial
    for s in tr:
        assert (s["scenario"], s["version"], s["trial_index"], s["run_id"]) == ("multi-step", "v1", 0, r["run_id"])
    assert [s["attributes"]["assay.step.kind"] for s in tr if s is not r] == ["agent", "llm", "tool", "llm", "tool", "llm"]


def test_handled_tool_error(lake):
    tr = one(lake, "tool-error-handled")
    assert [n for n, _ in steps(tr)] == ["invoke_agent support", "chat scripted-1", "execute_tool lookup_order",
                                         "chat scripted-1", "execute_tool refund", "chat scripted-1"]
    refund = next(s for s in tr if s["tool_name"] == "refund")
    assert refund["status_code"] == 2 and refund["error_type"] == "RuntimeError"
    assert refund["tool_call_id"] == "c2"
    ok = next(s for s in tr if s["tool_name"] == "lookup_order")
    assert ok["status_code"] != 2 and ok["attributes"]["gen_ai.tool.call.result"] == "order A1: 2 items, paid"
    r = root(tr)
    assert r["outcome"] == "pass" and r["status_code"] != 2 and r["error_class"] is None


def test_raised_tool_error_fails_trial(lake):
    tr = one(lake, "tool-error-raised")
    r = root(tr)
    assert (r["outcome"], r["error_class"], r["error_type"], r["status_code"]) == ("fail", "exception", "RuntimeError", 2)
    agent = next(s for s in tr if s["name"] == "invoke_agent support")
    assert agent["status_code"] == 2
    tool = next(s for s in tr if s["tool_name"] == "refund")
    assert tool["status_code"] == 2 and parent_of(tr, tool)["span_id"] == agent["span_id"]
    ev = spans(lake, "span_id = ?", [r["span_id"]])
    assert ev  # the root is stored


def test_subgraphs_are_nested_agents(lake):
    tr = one(lake, "multi-agent")
    assert steps(tr) == [
        ("invoke_agent supervisor", "assay.trial multi-agent"),
        ("invoke_agent researcher", "invoke_agent supervisor"),
        ("chat scripted-1", "invoke_agent researcher"),
        ("execute_tool lookup_order", "invoke_agent researcher"),
        ("chat scripted-1", "invoke_agent researcher"),
        ("invoke_agent calculator", "invoke_agent supervisor"),
        ("chat scripted-1", "invoke_agent calculator"),
        ("execute_tool add", "invoke_agent calculator"),
        ("chat scripted-1", "invoke_agent calculator"),
    ]
    assert [s["agent_name"] for s in tr if s["op"] == "invoke_agent"] == ["supervisor", "researcher", "calculator"]
    assert root(tr)["outcome"] == "pass"


@pytest.mark.parametrize("scenario,tool,args", [("async", "add", {"a": 1, "b": 2}), ("stream", "add", {"a": 4, "b": 4}),
                                                 ("create-agent", "add", {"a": 20, "b": 22})])
def test_async_stream_and_prebuilt(lake, scenario, tool, args):
    tr = one(lake, scenario)
    names = [n for n, _ in steps(tr)]
    assert names[1:] == ["chat scripted-1", f"execute_tool {tool}", "chat scripted-1"]
    assert names[0].startswith("invoke_agent ")
    t = next(s for s in tr if s["op"] == "execute_tool")
    assert json.loads(t["attributes"]["gen_ai.tool.call.arguments"]) == args
    assert root(tr)["outcome"] == "pass"
    assert all(s["scenario"] == scenario for s in tr)


def test_steps_cut_off_by_cancellation_are_recorded_failed(lake):
    """A timeout or a failing sibling node cancels a step mid-call; LangChain sends no callback
    for it, but the call happened: it is a failed step, so a timeout after a tool call is a
    timeout-with-work trial that counts, not a lost step."""
    tr = one(lake, "timeout-mid-tool")
    assert [n for n, _ in steps(tr)] == ["invoke_agent slow", "chat scripted-1", "execute_tool slow_lookup"]
    tool = next(s for s in tr if s["op"] == "execute_tool")
    assert tool["status_code"] == 2 and tool["error_type"] == "CancelledError"
    assert parent_of(tr, tool)["name"] == "invoke_agent slow"
    from ._helpers import query
    (row,) = query(lake, "SELECT n_tool, error_class, counted FROM trials WHERE scenario = 'timeout-mid-tool'")
    assert (row["n_tool"], row["error_class"], row["counted"]) == (1, "timeout", True)

    tr = one(lake, "fan-out-cancelled")
    cancelled = [s for s in tr if s["op"] in ("execute_tool", "chat")]
    assert sorted(s["op"] for s in cancelled) == ["chat", "execute_tool"]
    assert all(s["status_code"] == 2 and s["error_type"] == "CancelledError" for s in cancelled)
    assert "node b failed" not in " ".join(s["status_message"] or "" for s in cancelled)
    assert root(tr)["status_code"] == 2


def test_threads_and_foreign_spans_inherit_the_trial(lake):
    tr = one(lake, "thread")
    r = root(tr)
    names = [s["name"] for s in tr]
    assert names == ["assay.trial thread", "invoke_agent fetcher", "chat scripted-1", "execute_tool fetch",
                     "GET /status", "chat scripted-1"]
    foreign = next(s for s in tr if s["name"] == "GET /status")
    assert foreign["scope_name"] == "foreign.http"
    assert parent_of(tr, foreign)["name"] == "execute_tool fetch"  # made inside the tool
    assert (foreign["scenario"], foreign["trial_index"], foreign["run_id"]) == ("thread", 0, r["run_id"])
    assert r["outcome"] == "pass"


def test_step_recorded_inside_a_tool_is_its_child(lake):
    tr = one(lake, "step-in-tool")
    assert steps(tr) == [("invoke_agent stock", "assay.trial step-in-tool"), ("chat scripted-1", "invoke_agent stock"),
                         ("execute_tool availability", "invoke_agent stock"),
                         ("execute_tool check_stock", "execute_tool availability"),
                         ("chat scripted-1", "invoke_agent stock")]


def test_index_increments_per_scenario_and_version(lake):
    traces = trial_spans(lake, "repeat")
    roots = [root(t) for t in traces]
    assert [(x["trial_index"], x["outcome"], x["run_id"], x["version"]) for x in roots] == [
        (0, "pass", "run-fixed", "v2"), (1, "fail", "run-fixed", "v2"), (2, "pass", "run-fixed", "v2")]
    assert len({x["trace_id"] for x in roots}) == 3
    # other scenarios of the same process share one default run id
    others = {root(t)["run_id"] for sc in ("multi-step", "async", "thread") for t in trial_spans(lake, sc)}
    assert len(others) == 1 and others != {"run-fixed"}


def test_every_span_belongs_to_a_trial(lake):
    orphans = spans(lake, "scenario IS NULL")
    assert orphans == []


# ------------------------------------------------------------------ chat models calling chat models
def chats(tr):
    return [(s["provider"], s["input_tokens"], s["output_tokens"]) for s in tr if s["op"] == "chat"]


def tool_then_answer(scenario):
    return [("invoke_agent guarded", f"assay.trial {scenario}"), ("chat scripted-1", "invoke_agent guarded"),
            ("execute_tool add", "invoke_agent guarded"), ("chat scripted-1", "invoke_agent guarded")]


@pytest.mark.parametrize("scenario", ["wrapped", "wrapped-child", "wrapped-child-no-context", "wrapped-async"])
def test_model_calling_another_model_is_one_chat_per_model_call(lake, scenario):
    # the inner call records (its model, the messages and tools as sent, the usage as
    # returned) where the outer one would have: under the agent, also when the inner run is
    # a child of the outer run ("wrapped-child", also where the context does not reach)
    # rather than of the graph node
    tr = one(lake, scenario)
    assert root(tr)["outcome"] == "pass"
    assert steps(tr) == tool_then_answer(scenario)
    assert chats(tr) == [("scripted", 11, 7), ("scripted", 20, 5)]
    first = next(s for s in tr if s["op"] == "chat")
    assert [d["function"]["name"] for d in jload(first["attributes"]["gen_ai.tool.definitions"])] == ["add"]
    assert [m["role"] for m in jload(first["attributes"]["gen_ai.input.messages"])] == ["user"]
    if scenario != "wrapped-child-no-context":  # the node is known from the context's config
        assert first["attributes"]["assay.graph.node"] == "agent"


def test_model_asking_another_model_twice_is_two_chats(lake):
    assert chats(one(lake, "wrapped-retry")) == [("scripted", 11, 7), ("scripted", 3, 0), ("scripted", 20, 5)]


def test_model_answering_without_a_model_call_is_still_the_step(lake):
    assert chats(one(lake, "wrapped-cache-miss")) == [("scripted", 11, 7), ("scripted", 20, 5)]
    tr = one(lake, "wrapped-cache-hit")
    assert [n for n, _ in steps(tr)] == ["invoke_agent guarded", "chat guard-1", "execute_tool add", "chat guard-1"]
    assert chats(tr) == [("guarded", 11, 7), ("guarded", 20, 5)]


def test_failed_call_through_another_model_is_one_failed_chat(lake):
    tr = one(lake, "wrapped-error")
    assert root(tr)["outcome"] == "fail"
    (chat,) = [s for s in tr if s["op"] == "chat"]
    assert (chat["status_code"], chat["error_type"], chat["provider"]) == (2, "ConnectionError", "down")


def test_stream_through_another_model_is_one_chat(lake):
    tr = one(lake, "wrapped-stream")
    assert steps(tr) == [("invoke_agent guarded", "assay.trial wrapped-stream"), ("chat scripted-1", "invoke_agent guarded")]
    assert chats(tr) == [("streaming", 20, 5)]
    (chat,) = [s for s in tr if s["op"] == "chat"]
    # a streamed answer is assembled from AIMessageChunks: still the assistant speaking
    assert [m["role"] for m in jload(chat["attributes"]["gen_ai.output.messages"])] == ["assistant"]


def test_calls_that_are_not_nested_each_get_their_chat(lake):
    # a model call made by the code consuming a stream, between its chunks, is not part of
    # the streamed call; nor are calls of a batch, or of one generate with two prompts
    assert chats(one(lake, "stream-interleaved")) == [("streaming", 20, 5), ("scripted", 4, 1)]
    assert sorted(chats(one(lake, "batch"))) == [("scripted", n, 1) for n in (1, 2, 3, 4)]


def test_tool_returning_a_command_records_the_tool_message_it_carries(lake):
    tr = one(lake, "command-tool")
    (tool,) = [s for s in tr if s["op"] == "execute_tool"]
    assert (tool["tool_name"], tool["tool_call_id"], tool["status_code"]) == ("set_priority", "cmd1", 0)
    assert tool["attributes"]["gen_ai.tool.call.result"] == "priority set to high"


def test_direct_calls_cut_off_are_recorded_failed_when_the_trial_ends(lake):
    tr = one(lake, "cut-off-direct")
    # the call retried after a timeout in the same task is not taken for a model calling a model
    assert steps(tr) == [("execute_tool slow_lookup", "assay.trial cut-off-direct"),
                         ("chat", "assay.trial cut-off-direct"), ("chat", "assay.trial cut-off-direct"),
                         ("chat scripted-1", "assay.trial cut-off-direct")]
    assert all((s["status_code"], s["error_type"]) == (2, "CancelledError") for s in tr[1:4])
    # langchain-core before 1.8 sends no callback for a cancelled call (the trial's end records
    # it: "the trial ended (...) before ..."); 1.8 sends an error callback ("cancelled before ...")
    assert "before this tool call finished" in tr[1]["status_message"]
    assert (tr[4]["status_code"], tr[4]["input_tokens"]) == (0, 4)
    from ._helpers import query
    (row,) = query(lake, "SELECT n_tool, n_llm FROM trials WHERE scenario = 'cut-off-direct'")
    assert (row["n_tool"], row["n_llm"]) == (1, 3)


def test_stream_the_caller_stops_reading_is_not_a_failed_step(lake):
    tr = one(lake, "stream-stopped")
    (chat,) = [s for s in tr if s["op"] == "chat"]
    assert (chat["status_code"], chat["error_type"]) == (0, None)


def test_tool_interrupted_for_a_human_is_not_a_failed_step(lake):
    tr = one(lake, "interrupt-in-tool")
    tools = [s for s in tr if s["op"] == "execute_tool"]
    # the call that asked, and the call resumed with the answer: neither failed
    assert [(s["tool_call_id"], s["status_code"], s["error_type"]) for s in tools] == [("h1", 0, None), ("h1", 0, None)]
    assert tools[1]["attributes"]["gen_ai.tool.call.result"] == "refunded H1"


def test_usage_given_as_an_object_is_read(lake):
    tr = one(lake, "usage-object")
    assert [(s["name"], s["input_tokens"], s["output_tokens"]) for s in tr[1:]] == [("chat object-1", 6, 2)]


def test_runnables_inside_a_node_are_no_agent_steps_but_a_graph_is(lake):
    # prompt | model | parser in a node used to make invoke_agent ChatPromptTemplate,
    # RunnableSequence, StrOutputParser and (for with_retry) one for the model
    tr = one(lake, "lcel-in-node")
    assert steps(tr) == [
        ("invoke_agent outer_graph", "assay.trial lcel-in-node"),
        ("chat scripted-1", "invoke_agent outer_graph"),
        ("invoke_agent inner_graph", "invoke_agent outer_graph"),
        ("chat scripted-1", "invoke_agent inner_graph"),
    ]
    sub = next(s for s in tr if s["name"] == "invoke_agent inner_graph")
    chat = next(s for s in tr if s["name"] == "chat scripted-1" and parent_of(tr, s)["span_id"] == sub["span_id"])
    assert sub["start_time_unix_nano"] <= chat["start_time_unix_nano"]  # opened from the graph run's start


def test_a_retriever_lookup_is_a_step(lake):
    """A RAG node's retriever call left no span: a lookup that stopped happening or began
    failing was invisible to the steps, the fingerprint and the trial."""
    from ._helpers import query

    tr = one(lake, "rag")
    assert steps(tr) == [("invoke_agent rag", "assay.trial rag"), ("retrieval Docs", "invoke_agent rag"),
                         ("chat scripted-1", "invoke_agent rag")]
    (ret,) = [s for s in tr if s["name"] == "retrieval Docs"]
    assert (ret["op"], ret["kind"], ret["status_code"]) == ("retrieval", 3, 0)
    assert ret["attributes"]["gen_ai.data_source.id"] == "Docs"
    assert ret["attributes"]["gen_ai.retrieval.query.text"] == "2+3?"
    assert jload(ret["attributes"]["gen_ai.retrieval.documents"]) == [{"id": "kb-1", "score": 0.9}, {"id": "kb-2"}]
    kinds = [r["step_kind"] for r in query(lake, "SELECT step_kind FROM steps WHERE trace_id = ? ORDER BY seq",
                                            [ret["trace_id"]])]
    assert kinds == ["agent", "other", "respond"]
    down = one(lake, "rag-down")
    (ret,) = [s for s in down if s["name"] == "retrieval Docs"]
    assert (ret["status_code"], ret["error_type"]) == (2, "ConnectionError")
    assert (root(down)["outcome"], root(down)["error_class"]) == ("fail", "infrastructure")


def test_a_garbled_tool_call_is_a_tool_request_not_the_answer(lake):
    """LangChain keeps a tool call with unparsable arguments in invalid_tool_calls: left out
    of the output message, the turn read as the agent's final answer (a respond step)."""
    from ._helpers import query

    tr = one(lake, "invalid-tool-call")
    (chat,) = [s for s in tr if s["op"] == "chat"]
    (msg,) = jload(chat["attributes"]["gen_ai.output.messages"])
    assert [p for p in msg["parts"] if p["type"] == "tool_call"] == [
        {"type": "tool_call", "id": "bad1", "name": "add", "arguments": '{"a": 2, "b": '}]
    assert jload(chat["attributes"]["gen_ai.response.finish_reasons"]) == ["tool_calls"]
    kinds = query(lake, "SELECT step_kind, requested_tools FROM steps WHERE trace_id = ? ORDER BY seq", [chat["trace_id"]])
    assert [(k["step_kind"], k["requested_tools"]) for k in kinds] == [("agent", None), ("llm", True)]


def test_ctrl_c_during_a_tool_is_no_step_failure(tmp_path):
    # someone pressed Ctrl-C while the tool ran: the trial is interrupted, and no step of it
    # failed (an error there counted in n_errors and read as the agent breaking)
    from ._helpers import query

    lake = tmp_path / "lake"
    p = run_script("langgraph_small.py", lake, "ctrl-c")
    assert "interrupted" in p.stdout
    (tr,) = trial_spans(lake, "order")
    names = {s["name"]: s for s in tr}
    assert {"invoke_agent billing", "execute_tool secret_lookup"} <= set(names)
    assert [(s["name"], s["status_code"]) for s in tr if s["status_code"] == 2] == []
    for n in ("invoke_agent billing", "execute_tool secret_lookup"):
        assert names[n]["attributes"].get("assay.incomplete") == "interrupted", n
    (t,) = query(lake, "SELECT error_class, outcome, n_errors FROM trials")
    assert t == {"error_class": "interrupted", "outcome": None, "n_errors": 0}


def test_uninstrument_stops_recording_and_instrument_resumes_it(tmp_path):
    """LangChain cannot unregister a configure hook, so ours stays and ignores new runs once
    uninstrumented: a graph run then records no step, and recording resumes on instrument()."""
    lake = tmp_path / "lake"
    run_script("langgraph_small.py", lake, "uninstrument")
    names = {s: [x["name"] for x in trial_spans(lake, s)[0]] for s in ("before", "after", "again")}
    assert names["after"] == ["assay.trial after"]
    for s in ("before", "again"):
        assert {"invoke_agent billing", "execute_tool secret_lookup", "chat scripted-1"} <= set(names[s]), names[s]
    assert len(names["before"]) == len(names["again"])
