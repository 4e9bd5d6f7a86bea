"""steps / trials / fingerprints / stability / pass rates against values computed by hand."""

from __future__ import annotations

import math

import pytest

from otel_assay.analyze.engine import query_files
from otel_assay.analyze.fingerprint import fingerprint_matrix

from .conftest import rows
from .lakes import sid, span, tid, write_lake

A = {"assay.scenario": "calc", "assay.agent.version": "v1", "assay.run.id": "r1"}
TEXT = "Statistical testing requires repeated trials."  # 5 words, 1 sentence, 13 vowel groups


def chat(model, i, o, parts, **extra):
    import json
    return {**A, "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.provider.name": "openai",
            "gen_ai.usage.input_tokens": i, "gen_ai.usage.output_tokens": o,
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}]), **extra}


def tool(name, args, **extra):
    return {**A, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.arguments": args, **extra}


CALL = [{"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]


@pytest.fixture
def lake(tmp_path):
    spans = [
        # trial A: every step kind, a structural span between steps, an error then a retry
        span(1, 1, None, "assay.trial calc", 0, 100, {**A, "assay.trial.outcome": "pass", "assay.trial.index": 0}),
        span(1, 2, 1, "invoke_agent calc", 1, 99, {**A, "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "calc"}),
        span(1, 3, 2, "chat gpt-4o", 2, 10, chat("gpt-4o", 100, 20, CALL)),
        span(1, 4, 2, "execute_tool add", 11, 12, tool("add", '{"b": 3, "a": 2}'), status=2, status_message="boom"),
        span(1, 5, 2, "execute_tool add", 13, 14, tool("add", "{'a': 2, 'b': 3}")),
        span(1, 6, 2, "invoke_agent helper", 15, 30, {**A, "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}),
        span(1, 7, 6, "RunnableSequence", 16, 29, {}),
        span(1, 8, 7, "chat mystery", 17, 20, chat("mystery-model", 10, 5, [{"type": "text", "content": "hmm"}],
                                                      **{"gen_ai.response.finish_reasons": '["tool_calls"]'})),
        span(1, 9, 7, "execute_tool search", 21, 22, tool("search", '{"q": ""}')),
        span(1, 10, 2, "chat gpt-4o-mini", 31, 40, chat("gpt-4o-mini", 200, 10, [{"type": "text", "content": TEXT}])),
        # trial B: same scenario, no steps at all (an empty run)
        span(2, 1, None, "assay.trial calc", 0, 5, {**A, "assay.trial.outcome": "fail"}),
        # trial C: foreign, a span with no attributes at all
        span(3, 1, None, "GET /", 0, 5, {}, scope=None),
        # trial D: timed out after a tool call
        span(4, 1, None, "assay.trial calc", 0, 50, {**A}, status=2, status_message="deadline",
             ) | {"attributes": list({**A, "error.type": "TimeoutError"}.items())},
        span(4, 2, 1, "execute_tool search", 1, 2, tool("search", '{"q": "x"}')),
    ]
    return write_lake(tmp_path, spans)


def test_steps_of_trial_a(open_engine, lake):
    eng = open_engine(lake)
    st = rows(eng, "SELECT * FROM steps WHERE trace_id = ? ORDER BY seq", [tid(1)])
    assert [(r["seq"], r["span_id"], r["step_kind"], r["depth"], r["step_parent_id"]) for r in st] == [
        (1, sid(2), "agent", 1, None),
        (2, sid(3), "llm", 2, sid(2)),
        (3, sid(4), "tool", 2, sid(2)),
        (4, sid(5), "tool", 2, sid(2)),
        (5, sid(6), "agent", 2, sid(2)),
        (6, sid(8), "llm", 3, sid(6)),   # the structural RunnableSequence is skipped
        (7, sid(9), "tool", 3, sid(6)),
        (8, sid(10), "respond", 2, sid(2)),
    ]
    by = {r["span_id"]: r for r in st}
    # a JSON string and a Python-repr string of the same arguments are one canonical text
    assert by[sid(4)]["tool_args"] == by[sid(5)]["tool_args"] == '{"a":2,"b":3}'
    assert by[sid(9)]["tool_args"] == '{"q":""}'
    assert by[sid(4)]["status"] == "error" and by[sid(4)]["error_type"] == "boom"
    assert [by[sid(i)]["agent_name"] for i in (3, 4, 8, 9, 10)] == ["calc", "calc", "helper", "helper", "calc"]
    # tokens only on LLM calls; cost from the price table; unknown model: NULL, never 0
    assert by[sid(3)]["cost_usd"] == pytest.approx(100 / 1e6 * 2.5 + 20 / 1e6 * 10)
    assert by[sid(3)]["cost_source"] == "price_table"
    assert by[sid(8)]["cost_usd"] is None and by[sid(8)]["cost_source"] is None
    assert by[sid(10)]["cost_usd"] == pytest.approx(200 / 1e6 * 0.15 + 10 / 1e6 * 0.60)
    assert by[sid(2)]["input_tokens"] is None and by[sid(4)]["input_tokens"] is None
    assert by[sid(3)]["requested_tools"] is True and by[sid(10)]["requested_tools"] is False
    assert by[sid(10)]["output_text"] == TEXT


def test_trials(open_engine, lake):
    eng = open_engine(lake)
    t = {r["trace_id"]: r for r in rows(eng, "SELECT * FROM trials")}
    a = t[tid(1)]
    assert (a["scenario"], a["version"], a["run_id"], a["trial_index"], a["outcome"]) == ("calc", "v1", "r1", 0, "pass")
    assert a["models"] == ["gpt-4o", "gpt-4o-mini", "mystery-model"]
    assert (a["n_spans"], a["n_steps"], a["n_llm"], a["n_tool"], a["n_errors"]) == (10, 8, 3, 3, 1)
    assert (a["input_tokens"], a["output_tokens"]) == (310, 35)
    assert a["cost_usd"] is None  # one LLM call could not be priced
    assert a["duration_ns"] == 100_000_000
    assert (a["error_class"], a["counted"], a["passed"]) == (None, True, True)
    b = t[tid(2)]
    assert (b["n_steps"], b["error_class"], b["counted"], b["passed"], b["cost_usd"]) == (0, "empty-run", False, False, 0.0)
    c = t[tid(3)]
    assert (c["scenario"], c["version"], c["outcome"], c["n_steps"], c["error_class"]) == (None, None, None, 0, "empty-run")
    d = t[tid(4)]
    assert (d["error_class"], d["counted"], d["passed"]) == ("timeout", True, False)


def test_pass_rates(open_engine, lake):
    eng = open_engine(lake)
    r = rows(eng, "SELECT * FROM pass_rates WHERE scenario = 'calc'")[0]
    # A passed, D timed out after a tool call (a failure), B is an empty run (excluded)
    assert (r["per_protocol_n"], r["per_protocol_passes"], r["per_protocol_rate"]) == (2, 1, 0.5)
    assert (r["itt_n"], r["itt_passes"], r["itt_rate"]) == (3, 1, pytest.approx(1 / 3))
    assert (r["n_empty_run"], r["n_timeout"], r["n_unknown"]) == (1, 1, 0)


def test_fingerprint_columns(open_engine, lake):
    eng = open_engine(lake)
    f = rows(eng, "SELECT * FROM fingerprints WHERE trace_id = ?", [tid(1)])[0]
    grade = 0.39 * 5 / 1 + 11.8 * 13 / 5 - 15.59
    expected = {
        # 8 steps, 6 of them work steps (2 agents are containers): counts and shares of work
        # are per work step, the container shares per step
        "n_steps": 6, "max_depth": 3, "n_branches": 6,  # leaves: 3, 4, 5, 8, 9, 10
        "output_tokens": 10, "output_complexity": grade / 18,
        "frac_llm": 2 / 6, "frac_tool": 3 / 6, "frac_agent": 2 / 8, "frac_reason": 0, "frac_respond": 1 / 6,
        "frac_workflow": 0, "frac_other": 0,
        "error_flag": 1, "recovery_rate": 1,  # the failed add was retried successfully
        "total_tokens": 345, "tokens_per_step": 345 / 6, "latency_s": 0.1,
    }
    for col, want in expected.items():
        assert f[col] == pytest.approx(want), col
    assert f["cost_usd"] is None and f["cost_per_step"] is None
    empty = rows(eng, "SELECT * FROM fingerprints WHERE trace_id = ?", [tid(2)])[0]
    assert all(empty[c] == 0 for c in expected if c not in ("latency_s", "recovery_rate"))
    assert empty["recovery_rate"] == 1.0
    d = rows(eng, "SELECT * FROM fingerprints WHERE trace_id = ?", [tid(4)])[0]
    assert (d["error_flag"], d["recovery_rate"]) == (0.0, 1.0)


def test_total_tokens_sums_what_the_llm_calls_report(tmp_path, open_engine):
    # a NULL input sum (no call reported input tokens) made the total 0, whatever the output
    def call(trace, span_id, start, **usage):
        return span(trace, span_id, 1, "chat m", start, start + 1, {
            **A, "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
            **{f"gen_ai.usage.{k}_tokens": v for k, v in usage.items()}})

    write_lake(tmp_path, [
        span(1, 1, None, "assay.trial calc", 0, 10, A), call(1, 2, 1, output=30), call(1, 3, 3, output=12),
        span(2, 1, None, "assay.trial calc", 0, 10, A), call(2, 2, 1, input=100), call(2, 3, 3, output=12),
        span(3, 1, None, "assay.trial calc", 0, 10, A), call(3, 2, 1),
        span(4, 1, None, "assay.trial calc", 0, 10, A), call(4, 2, 1, input=7, output=3), call(4, 3, 3),
        span(5, 1, None, "assay.trial calc", 0, 10, A),
    ])
    got = {r["trace_id"]: (r["total_tokens"], r["tokens_per_step"]) for r in rows(
        open_engine(tmp_path), "SELECT trace_id, total_tokens, tokens_per_step FROM fingerprints")}
    assert got == {tid(1): (42, 21), tid(2): (112, 56), tid(3): (None, None), tid(4): (10, 5), tid(5): (0, 0)}


def test_a_failed_last_llm_call_is_not_the_respond_step(tmp_path, open_engine):
    write_lake(tmp_path, [
        span(1, 1, None, "assay.trial calc", 0, 100, {**A}),
        span(1, 2, 1, "chat gpt-4o", 1, 10, chat("gpt-4o", 100, 20, CALL)),
        span(1, 3, 1, "execute_tool add", 11, 12, tool("add", "{}")),
        span(1, 4, 1, "chat gpt-4o", 13, 20, {**A, "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
             status=2, status_message="provider error"),
    ])
    st = rows(open_engine(tmp_path), "SELECT step_kind, status FROM steps ORDER BY seq")
    assert st == [{"step_kind": "llm", "status": "ok"}, {"step_kind": "tool", "status": "ok"},
                  {"step_kind": "llm", "status": "error"}]


def test_recovery_rate_counts_only_later_successes_of_the_same_tool(tmp_path, open_engine):
    write_lake(tmp_path, [
        span(1, 1, None, "assay.trial calc", 0, 100, {**A}),
        span(1, 2, 1, "execute_tool add", 1, 2, tool("add", "{}")),                     # a success before: no recovery
        span(1, 3, 1, "execute_tool add", 3, 4, tool("add", "{}"), status=2),           # never retried
        span(1, 4, 1, "execute_tool search", 5, 6, tool("search", "{}"), status=2),     # retried below
        span(1, 5, 1, "execute_tool mul", 7, 8, tool("mul", "{}")),                     # another tool: no recovery
        span(1, 6, 1, "execute_tool search", 9, 10, tool("search", "{}"), status=2),
        span(1, 7, 1, "execute_tool search", 11, 12, tool("search", "{}")),
    ])
    f = rows(open_engine(tmp_path), "SELECT error_flag, recovery_rate FROM fingerprints")[0]
    assert f == {"error_flag": 1.0, "recovery_rate": pytest.approx(2 / 3)}


# hand-built runs of tool calls (name, arguments) and their known tool_usage_stability,
# redundancy and drift flags (no LLM calls: response consistency and cost per progress are 1)
STABILITY_RUNS = {
    # a healthy run that calls two tools once each: one switch in two calls, on the floor
    "two tools once each": ([("lookup", '{"q":1}'), ("refund", '{"id":1}')], 0.5, 1.0, []),
    # the same run regressed into repeating a call: no more stable than the healthy run,
    # and the repeat is redundancy's (2 distinct of 3 calls)
    "a call repeated": ([("lookup", '{"q":1}'), ("lookup", '{"q":1}'), ("refund", '{"id":1}')], 0.5, 2 / 3, []),
    # thrashing: a fresh tool on every call
    "six tools once each": ([(f"t{i}", "{}") for i in range(6)], 1 - 5 / 6, 1.0, ["tool_usage_stability"]),
    "one tool, new arguments each time": ([("search", f'{{"q":{i}}}') for i in range(5)], 1.0, 1.0, []),
    "two tools four times each": ([(t, f'{{"n":{i}}}') for t in ("lookup", "refund") for i in range(4)],
                                  1 - 1 / 8, 1.0, []),
    "one call": ([("lookup", "{}")], 1.0, 1.0, []),
    "the same call looped": ([("lookup", "{}")] * 4, 1.0, 0.25, ["redundancy"]),
}


def test_stability_of_hand_built_runs(tmp_path, open_engine):
    spans = []
    for n, (calls, *_) in enumerate(STABILITY_RUNS.values(), start=1):
        spans.append(span(n, 1, None, "assay.trial s", 0, 100, {**A}))
        spans += [span(n, 2 + i, 1, f"execute_tool {name}", 1 + i, 2 + i, tool(name, args))
                  for i, (name, args) in enumerate(calls)]
    eng = open_engine(write_lake(tmp_path, spans))
    got = {name: rows(eng, "SELECT * FROM stability WHERE trace_id = ?", [tid(n)])[0]
           for n, name in enumerate(STABILITY_RUNS, start=1)}
    for name, (_, usage, redundancy, flags) in STABILITY_RUNS.items():
        g = got[name]
        assert (g["tool_usage_stability"], g["redundancy"], g["drift_flags"]) == (
            pytest.approx(usage), pytest.approx(redundancy), flags), name
        assert (g["response_consistency"], g["cost_per_progress"]) == (1.0, 1.0), name
    assert got["a call repeated"]["weakest_score"] <= got["two tools once each"]["weakest_score"]


def test_fingerprint_matrix_tool_vocabulary(open_engine, lake):
    eng = open_engine(lake)
    m = fingerprint_matrix(eng, vocabulary=["add", "search", "never_used"]).to_pylist()
    a = next(r for r in m if r["trace_id"] == tid(1))
    assert (a["tool:add"], a["tool:search"], a["tool:never_used"]) == (2 / 6, 1 / 6, 0.0)  # per work step
    d = next(r for r in m if r["trace_id"] == tid(4))
    assert (d["tool:add"], d["tool:search"]) == (0.0, 1.0)
    assert len(m) == 4
    default = fingerprint_matrix(eng)
    assert [c for c in default.column_names if c.startswith("tool:")] == ["tool:add", "tool:search"]


def test_stability(open_engine, lake):
    eng = open_engine(lake)
    s = rows(eng, "SELECT * FROM stability WHERE trace_id = ?", [tid(1)])[0]
    assert s["tool_usage_stability"] == pytest.approx(1 - (2 - 1) / 2)   # add twice with the same arguments, search
    assert s["redundancy"] == pytest.approx(2 / 3)
    assert s["cost_per_progress"] == 1.0        # 345 tokens / 2 distinct calls < 2000
    # the two texts ('hmm' and TEXT) differ a lot in length: see test_response_consistency_cv
    assert s["weakest_score"] == pytest.approx(s["response_consistency"]) and s["weakest_score"] < 0.5
    assert s["drift_flags"] == ["response_consistency"]
    d = rows(eng, "SELECT * FROM stability WHERE trace_id = ?", [tid(4)])[0]
    # no tokens were spent: cost_per_progress is 1; one tool call: usage stability 1
    assert (d["tool_usage_stability"], d["redundancy"], d["cost_per_progress"], d["weakest_score"]) == (1, 1, 1, 1)
    summary = rows(eng, "SELECT * FROM stability_summary WHERE scenario = 'calc'")[0]
    weakest = [s["weakest_score"], 1.0, 1.0]   # A, B (no steps), D
    mean = sum(weakest) / 3
    assert summary["n_trials"] == 3
    assert summary["score"] == pytest.approx(mean)
    assert summary["weakest_score"] == pytest.approx(min(weakest))
    assert summary["variance"] == pytest.approx(sum((w - mean) ** 2 for w in weakest) / 3)


def test_response_consistency_cv(open_engine, lake):
    eng = open_engine(lake)
    # two texts: 'hmm' (3) and TEXT (45 chars): cv = std/mean
    n = [3, len(TEXT)]
    mean = sum(n) / 2
    cv = math.sqrt(sum((x - mean) ** 2 for x in n) / 2) / mean
    s = rows(eng, "SELECT response_consistency FROM stability WHERE trace_id = ?", [tid(1)])[0]
    assert s["response_consistency"] == pytest.approx(1 - min(1, cv))


def test_views_read_the_same_rows_created_before_or_after_the_cache(open_engine, lake):
    """The engine creates the views above `steps` when first used, which after materialize()
    binds them against the cached tables: each must read what it read when every view was
    created at open and bound against the span tree."""
    eager = open_engine(lake)
    eager.rows("SELECT count(*) FROM stability_summary")  # every view created now, before anything is cached
    eager.materialize(["steps", "trials"])
    deferred = open_engine(lake)
    deferred.materialize(["steps", "trials"])
    counts = {}
    for view in query_files():
        got = [sorted(map(repr, eng.query(f"SELECT * FROM {view}").to_pylist())) for eng in (eager, deferred)]
        assert got[0] == got[1], view
        counts[view] = len(got[0])
    assert {v: counts[v] for v in ("steps", "trials", "pass_rates", "fingerprints", "decision_paths", "step_states",
                                   "tool_arguments", "stability", "stability_summary")} == {
        "steps": 9, "trials": 4, "pass_rates": 2, "fingerprints": 4, "decision_paths": 4, "step_states": 9,
        "tool_arguments": 4, "stability": 4, "stability_summary": 2}
