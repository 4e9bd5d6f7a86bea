"""Numbers checked by hand in review: selections reach the aggregates, the intent-to-treat
rate, and promoted attributes recorded with another type than their typed column's."""

from __future__ import annotations

import json

import pytest

from otel_assay.cli import main

from .conftest import rows
from .lakes import sid, span, tid, write_lake


def run(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    return out.out


def chat(extra=None):
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5, **(extra or {})}


def test_pass_rates_and_stability_aggregate_only_the_selected_trials(capsys, tmp_path):
    spans = []
    # same scenario and version, two runs: r1 passes with one tool call, r2 fails looping
    for n, run_id, outcome, calls in [(1, "r1", "pass", 1), (2, "r2", "fail", 4)]:
        a = {"assay.scenario": "s", "assay.agent.version": "v1", "assay.run.id": run_id}
        spans += [span(n, 1, None, "assay.trial s", 0, 100, {**a, "assay.trial.outcome": outcome}),
                  span(n, 2, 1, "chat", 1, 5, {**a, **chat()})]
        spans += [span(n, 10 + i, 1, "execute_tool t", 10 + i, 11 + i,
                       {**a, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
                        "gen_ai.tool.call.arguments": "{}"}) for i in range(calls)]
    lake = str(write_lake(tmp_path / "lake", spans))
    (rate,) = json.loads(run(capsys, "pass-rates", lake, "--select", "run=r1", "--format", "json"))
    assert (rate["n_trials"], rate["per_protocol_n"], rate["per_protocol_rate"], rate["itt_rate"]) == (1, 1, 1.0, 1.0)
    (summary,) = json.loads(run(capsys, "stability", lake, "--select", "run=r1", "--format", "json"))
    # r2 alone has redundancy 1/4; r1 alone is perfectly stable
    assert (summary["n_trials"], summary["score"], summary["weakest_score"], summary["variance"]) == (1, 1.0, 1.0, 0.0)
    (summary,) = json.loads(run(capsys, "stability", lake, "--select", "outcome=fail", "--format", "json"))
    assert (summary["n_trials"], summary["weakest_score"], summary["drift_flags"]) == (1, 0.25, ["redundancy"])
    (both,) = json.loads(run(capsys, "pass-rates", lake, "--format", "json"))
    assert (both["n_trials"], both["per_protocol_rate"]) == (2, 0.5)


def test_intent_to_treat_counts_an_excluded_trial_as_a_failure(open_engine, tmp_path):
    a = {"assay.scenario": "s", "assay.agent.version": "v1"}
    spans = []
    for n, extra in enumerate([{"assay.trial.outcome": "pass"},
                               {"assay.trial.outcome": "fail"},
                               # broken before the agent ran, yet the check passed
                               {"assay.trial.outcome": "pass", "assay.error.class": "pre-validation"},
                               {"assay.trial.outcome": "pass", "assay.error.class": "infrastructure"}], start=1):
        spans += [span(n, 1, None, "assay.trial s", 0, 10, {**a, **extra}), span(n, 2, 1, "chat", 1, 2, {**a, **chat()})]
    eng = open_engine(write_lake(tmp_path, spans))
    (r,) = rows(eng, "SELECT * FROM pass_rates")
    assert (r["per_protocol_passes"], r["per_protocol_n"]) == (1, 2)
    # intent to treat: every trial, the excluded ones as failures
    assert (r["itt_passes"], r["itt_n"], r["itt_rate"]) == (1, 4, 0.25)


def test_attributes_of_another_type_than_their_column_still_count(open_engine, tmp_path):
    # otel_assay.trial("calc", version=2) and t.outcome(passed=True, score=1) record ints; the
    # lake keeps a value of another type than its typed column's in the attributes map
    a = {"assay.scenario": 7, "assay.agent.version": 2, "assay.run.id": 42, "assay.trial.index": "3"}
    spans = [
        span(1, 1, None, "assay.trial 7", 0, 100, {**a, "assay.trial.outcome": "pass", "assay.trial.score": 1}),
        span(1, 2, 1, "chat", 1, 5, {**a, **chat({"gen_ai.agent.name": 5})}),
        span(1, 3, 1, "execute_tool 123", 10, 20, {**a, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": 123,
                                                   "gen_ai.tool.call.id": 99, "error.type": 500}, status=2),
        span(1, 4, 1, "chat", 30, 40, {**a, **chat()}),
    ]
    eng = open_engine(write_lake(tmp_path, spans))
    (t,) = rows(eng, "SELECT * FROM trials")
    assert (t["scenario"], t["version"], t["run_id"], t["trial_index"], t["score"]) == ("7", "2", "42", 3, 1.0)
    st = rows(eng, "SELECT * FROM steps ORDER BY seq")
    assert [s["step_kind"] for s in st] == ["llm", "tool", "respond"]
    assert st[0]["agent_name"] == "5"
    assert (st[1]["tool_name"], st[1]["tool_call_id"], st[1]["error_type"]) == ("123", "99", "500")
    assert rows(eng, "SELECT tool_name FROM fingerprint_tools") == [{"tool_name": "123"}]
    assert rows(eng, "SELECT trace_id FROM trials WHERE version = '2'") == [{"trace_id": tid(1)}]


def test_a_boolean_outcome_reads_as_pass_or_fail(open_engine, tmp_path):
    a = {"assay.scenario": "s", "assay.agent.version": "v1"}
    spans = [span(i, 1, None, "assay.trial s", 0, 100, {**a, "assay.trial.outcome": v})
             for i, v in ((1, True), (2, False), (3, "PASS"), (4, "maybe"))]
    eng = open_engine(write_lake(tmp_path, spans))
    got = [(r["outcome"], r["passed"]) for r in rows(eng, "SELECT * FROM trials ORDER BY trace_id")]
    assert got == [("pass", True), ("fail", False), ("pass", True), ("maybe", None)]


def test_calls_without_recorded_arguments_are_not_counted_as_repeats(open_engine, tmp_path):
    a = {"assay.scenario": "s", "assay.agent.version": "v1"}
    tool = {**a, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
    spans = [span(1, 1, None, "assay.trial s", 0, 100, a),
             # content capture off: three calls, arguments unknown
             *[span(1, 10 + i, 1, "execute_tool search", 10 * i + 1, 10 * i + 5, {**tool, "gen_ai.tool.call.id": f"c{i}"})
               for i in range(3)],
             span(2, 1, None, "assay.trial s", 0, 100, a),
             # a real loop: the same recorded arguments twice, and one call without them
             *[span(2, 10 + i, 1, "execute_tool search", 10 * i + 1, 10 * i + 5,
                    {**tool, **({"gen_ai.tool.call.arguments": '{"q": "x"}'} if i < 2 else {})}) for i in range(3)]]
    eng = open_engine(write_lake(tmp_path, spans))
    got = {r["trace_id"]: r for r in rows(eng, "SELECT * FROM stability")}
    assert (got[tid(1)]["redundancy"], got[tid(1)]["drift_flags"]) == (1.0, [])
    assert got[tid(2)]["redundancy"] == pytest.approx(2 / 3)


def test_an_outcome_labelled_by_trace_id_keeps_the_scenario_labelled_by_conversation(capsys, tmp_path):
    lake = write_lake(tmp_path / "lake", [
        span(1, 1, None, "chat", 0, 10, {**chat({"gen_ai.conversation.id": "conv-1"})}, scope="x"),
        span(2, 1, None, "chat", 0, 10, {**chat({"gen_ai.conversation.id": "conv-1"})}, scope="x"),
    ])
    (tmp_path / "conv.csv").write_text("gen_ai.conversation.id,scenario,version,outcome\nconv-1,refund,v2,fail\n")
    (tmp_path / "outcomes.csv").write_text(f"trace_id,outcome\n{tid(1)},pass\n")
    run(capsys, "label", str(lake), "--file", str(tmp_path / "conv.csv"))
    run(capsys, "label", str(lake), "--file", str(tmp_path / "outcomes.csv"))
    got = {t["trace_id"]: t for t in json.loads(run(capsys, "trials", str(lake), "--format", "json"))}
    # the trace id label wins where it gives a value; the conversation label fills the rest
    assert [(got[tid(n)]["scenario"], got[tid(n)]["version"], got[tid(n)]["outcome"]) for n in (1, 2)] == [
        ("refund", "v2", "pass"), ("refund", "v2", "fail")]


def test_parallel_calls_recorded_with_ids_by_one_convention_only_count_once(open_engine, tmp_path):
    """LangGraph traced by OpenLLMetry (no call ids) and LangSmith (call ids): two parallel
    calls of one tool are two steps, not four."""
    tl, ls = "opentelemetry.instrumentation.langchain", "langsmith"
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
    eng = open_engine(write_lake(tmp_path, [
        span(1, 1, None, "calc.workflow", 0, 100, {"traceloop.span.kind": "workflow"}, scope=tl),
        span(1, 2, 1, "execute_tool search", 10, 30, {**tool, "traceloop.span.kind": "tool"}, scope=tl),
        span(1, 3, 1, "execute_tool search", 11, 31, {**tool, "traceloop.span.kind": "tool"}, scope=tl),
        span(1, 4, 2, "search", 12, 29, {**tool, "langsmith.span.kind": "tool", "gen_ai.tool.call.id": "c1"}, scope=ls),
        span(1, 5, 3, "search", 13, 30, {**tool, "langsmith.span.kind": "tool", "gen_ai.tool.call.id": "c2"}, scope=ls),
        # a call the kept convention did not record, with an id of its own, stays a step
        span(2, 1, None, "execute_tool search", 10, 30, {**tool, "gen_ai.tool.call.id": "c1"}, scope="my.genai"),
        span(2, 2, None, "search", 15, 35, {**tool, "langsmith.span.kind": "tool", "gen_ai.tool.call.id": "c9"}, scope=ls),
        span(2, 3, None, "search", 11, 29, {**tool, "langsmith.span.kind": "tool", "gen_ai.tool.call.id": "c1"}, scope=ls),
    ]))
    got = rows(eng, "SELECT trace_id, span_id, source_convention FROM steps WHERE step_kind = 'tool' ORDER BY trace_id, seq")
    assert [(r["trace_id"], r["span_id"]) for r in got] == [(tid(1), sid(2)), (tid(1), sid(3)), (tid(2), sid(1)), (tid(2), sid(2))]
    assert rows(eng, "SELECT n_tool FROM trials ORDER BY trace_id") == [{"n_tool": 2}, {"n_tool": 2}]


def test_a_step_under_a_dropped_duplicate_hangs_under_the_step_that_replaced_it(open_engine, tmp_path):
    """AutoGen + OpenInference: OpenInference's AGENT span wraps AutoGen's invoke_agent (the
    native one is kept), and OpenInference's LLM span is a child of its own AGENT span. The
    LLM call belongs to the agent, not to the workflow above the pair."""
    oi = "openinference.instrumentation.autogen_agentchat"
    eng = open_engine(write_lake(tmp_path, [
        span(1, 1, None, "run_stream", 0, 100, {"openinference.span.kind": "CHAIN"}, scope=oi),
        span(1, 2, 1, "calc.on_messages_stream", 1, 99, {"openinference.span.kind": "AGENT", "agent.name": "calc"}, scope=oi),
        span(1, 3, 2, "invoke_agent calc", 2, 98, {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "calc"},
             scope="autogen-core"),
        span(1, 4, 3, "calc.add", 10, 30, {"openinference.span.kind": "TOOL", "tool.name": "add",
                                           "tool.parameters": '{"a": 2, "b": 3}'}, scope=oi),
        span(1, 5, 4, "execute_tool add", 11, 29, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add",
                                                   "gen_ai.tool.call.id": "call_1"}, scope="autogen-core"),
        span(1, 6, 2, "ChatCompletion", 40, 60, {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                                                 "llm.output_messages.0.message.content": "5"}, scope=oi),
    ]))
    got = rows(eng, "SELECT span_id, step_kind, step_parent_id, depth, agent_name, tool_args FROM steps ORDER BY seq")
    assert [(r["span_id"], r["step_kind"], r["step_parent_id"], r["depth"]) for r in got] == [
        (sid(1), "workflow", None, 1), (sid(3), "agent", sid(1), 2),
        (sid(5), "tool", sid(3), 3), (sid(6), "respond", sid(3), 3)]
    assert got[2]["tool_args"] == '{"a":2,"b":3}' and got[3]["agent_name"] == "calc"
    f = rows(eng, "SELECT max_depth, n_branches FROM fingerprints")[0]
    assert (f["max_depth"], f["n_branches"]) == (3, 2)
