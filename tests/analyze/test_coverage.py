"""Coverage sets and numbers against values computed by hand."""

from __future__ import annotations

import json
import math

import pytest

from otel_assay.analyze.coverage import boundary_tests, coverage_report, coverage_sets
from otel_assay.stats.coverage import chao1

from .lakes import span, write_lake

DEFS = json.dumps([
    {"type": "function", "name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 10}, "b": {"type": "integer"}}}},
    {"type": "function", "name": "search", "parameters": {"type": "object", "properties": {
        "q": {"type": "string", "maxLength": 5}, "mode": {"type": "string", "enum": ["fast", "deep"]}}}},
    {"type": "function", "name": "unused_tool", "parameters": {"type": "object", "properties": {
        "flag": {"type": "boolean"}}}},
])


def trial(n, model, calls):
    """LLM call (offered DEFS) -> the tool calls -> final LLM answer."""
    out = [span(n, 1, None, "chat", 0, 1, {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                                            "gen_ai.tool.definitions": DEFS})]
    for i, (tool, args) in enumerate(calls):
        out.append(span(n, 2 + i, None, f"execute_tool {tool}", 2 + i, 2.5 + i,
                        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                         "gen_ai.tool.call.arguments": json.dumps(args)}))
    out.append(span(n, 20, None, "chat", 30, 31, {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                                                 "gen_ai.output.messages": '[{"role":"assistant","parts":[{"type":"text","content":"ok"}]}]'}))
    return out


@pytest.fixture
def lake(tmp_path):
    return write_lake(tmp_path, [
        *trial(1, "gpt-4o", [("add", {"a": 0, "b": 1})]),
        *trial(2, "gpt-4o", [("add", {"a": 5, "b": 1})]),
        *trial(3, "claude-3-5-sonnet", [("search", {"q": "", "mode": "fast"})]),
        *trial(4, "gpt-4o", [("add", {"a": 10}), ("add", {"a": 10})]),
    ])


def test_boundaries_from_schema():
    schema = json.loads(DEFS)[1]["parameters"]
    assert set(boundary_tests("search", schema)) == {
        ("search", "q", "maxLength=5"), ("search", "q", "empty"),
        ("search", "mode", 'enum="fast"'), ("search", "mode", 'enum="deep"')}
    tests = boundary_tests("x", {"type": "object", "properties": {
        "n": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
        "f": {"type": "number", "minimum": 0.5},
        "l": {"type": "array", "minItems": 1, "maxItems": 3}}})
    hit = {b[2] for b, t in tests.items() if t({"n": 1, "f": 0.5, "l": [1, 2, 3]}[b[1]])}
    assert hit == {"min>0", "min=0.5", "maxItems=3"}
    assert not tests[("x", "n", "max<10")](10) and tests[("x", "n", "max<10")](9)
    assert not tests[("x", "f", "min=0.5")](True)


def test_a_zero_minimum_length_is_the_empty_boundary_not_a_second_one():
    """`minLength: 0` and the empty string are one value: it hit two boundaries, which
    counted one test twice in the boundary dimension."""
    tests = boundary_tests("x", {"type": "object", "properties": {
        "s": {"type": "string", "minLength": 0, "maxLength": 3}, "l": {"type": "array", "minItems": 0},
        "t": {"type": "string"}}})
    assert {b[1:] for b in tests} == {("s", "minLength=0"), ("s", "maxLength=3"), ("l", "minItems=0"), ("t", "empty")}
    assert {b[1:] for b, t in tests.items() if t({"s": "", "l": [], "t": ""}[b[1]])} == {
        ("s", "minLength=0"), ("l", "minItems=0"), ("t", "empty")}


def test_coverage_sets(open_engine, lake):
    sets = coverage_sets(open_engine(lake))
    assert sets.n_trials == 4
    assert dict(sets.tools_used) == {"add": 4, "search": 1}
    assert sets.tools_defined == {"add", "search", "unused_tool"}
    assert dict(sets.path_counts) == {
        "llm > tool:add > respond": 2, "llm > tool:search > respond": 1,
        "llm > tool:add > tool:add > respond": 1}
    assert dict(sets.state_counts) == {
        " | llm | start": 4, " | tool:add | llm": 3, " | respond | tool:add": 3,
        " | tool:search | llm": 1, " | respond | tool:search": 1, " | tool:add | tool:add": 1}
    # the per-trial view holds the same visits: the trial with two adds passes tool:add twice
    per_trial = open_engine(lake).rows("SELECT state, list(visits ORDER BY visits) FROM abstract_states GROUP BY 1")
    assert dict(per_trial) == {
        " | llm | start": [1, 1, 1, 1], " | tool:add | llm": [1, 1, 1], " | respond | tool:add": [1, 1, 1],
        " | tool:search | llm": [1], " | respond | tool:search": [1], " | tool:add | tool:add": [1]}
    assert sets.boundaries == {("add", "a", "min=0"), ("add", "a", "max=10"), ("search", "q", "maxLength=5"),
                               ("search", "q", "empty"), ("search", "mode", 'enum="fast"'),
                               ("search", "mode", 'enum="deep"'), ("unused_tool", "flag", "true"),
                               ("unused_tool", "flag", "false")}
    assert sets.boundaries_hit == {("add", "a", "min=0"), ("add", "a", "max=10"), ("search", "q", "empty"),
                                   ("search", "mode", 'enum="fast"')}
    assert dict(sets.models_tested) == {"gpt-4o": 6, "claude-3-5-sonnet": 2}


def test_coverage_of_some_trials_over_materialized_steps(open_engine, lake):
    # the gate's case: steps cached, coverage of the candidate's trials only (the view of steps
    # is narrowed to them for the queries, then put back)
    eng = open_engine(lake)
    eng.materialize(["steps", "trials"])
    n_steps = eng.rows("SELECT count(*) FROM steps")[0][0]
    eng.con.execute("CREATE TEMP TABLE picked AS SELECT trace_id FROM trials ORDER BY trace_id LIMIT 2")
    picked = {r[0] for r in eng.rows("SELECT trace_id FROM picked")}
    sets = coverage_sets(eng, "picked")
    assert eng.rows("SELECT count(*) FROM steps")[0][0] == n_steps
    fresh = open_engine(lake)
    fresh.con.execute("CREATE TEMP TABLE picked AS SELECT unnest(?::VARCHAR[]) AS trace_id", [sorted(picked)])
    expected = coverage_sets(fresh, "picked")  # steps not materialized: filtered after the views
    assert sets.n_trials == 2
    for name in ("tools_used", "path_counts", "state_counts", "boundaries_hit", "models_tested", "tools_defined"):
        assert getattr(sets, name) == getattr(expected, name), name
    assert sum(sets.path_counts.values()) == 2


def test_decision_paths_of_tools_named_like_the_separators_stay_apart(tmp_path, open_engine):
    # a tool named `add > tool:add` read as two add steps: two paths counted as one for Chao1
    write_lake(tmp_path, [
        *trial(1, "m", [("add", {}), ("add", {})]),
        *trial(2, "m", [("add > tool:add", {})]),
        *trial(3, "m", [("x\\", {}), ("y", {})]),
        *trial(4, "m", [("x\\ > tool:y", {})]),
        *trial(5, "m", [("search", {})]),
    ])
    assert dict(coverage_sets(open_engine(tmp_path)).path_counts) == {
        "llm > tool:add > tool:add > respond": 1,
        "llm > tool:add \\> tool\\:add > respond": 1,
        "llm > tool:x\\\\ > tool:y > respond": 1,
        "llm > tool:x\\\\ \\> tool\\:y > respond": 1,
        "llm > tool:search > respond": 1}


def test_states_of_names_holding_the_separator_stay_apart(tmp_path, open_engine):
    # agent `a | tool:b` answering, and agent `a` calling a tool named `b | respond`, both
    # read "a | tool:b | respond | start": two states counted as one
    def step(n, agent, attrs):
        return span(n, 1, None, "step", 0, 1, {"gen_ai.agent.name": agent, **attrs})

    write_lake(tmp_path, [
        step(1, "a | tool:b", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}),
        step(2, "a", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "b | respond"}),
        step(3, "x\\", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}),
        step(4, "x", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}),
    ])
    assert dict(coverage_sets(open_engine(tmp_path)).state_counts) == {
        "a \\| tool:b | respond | start": 1,
        "a | tool:b \\| respond | start": 1,
        "x\\\\ | tool:t | start": 1,
        "x | tool:t | start": 1}


def test_coverage_numbers(open_engine, lake):
    sets = coverage_sets(open_engine(lake))
    report = coverage_report(sets, models_target=["gpt-4o", "o1"], state_lambda=50)
    dims = {d.name: d for d in report.dimensions}
    assert chao1({"a": 2, "b": 1, "c": 1}) == 3 + 3 / 4 * 2 * 1 / (2 * 2)
    expected = {"tool": 2 / 3, "path": 3 / 3.375, "state": 1 - math.exp(-6 / 50), "boundary": 4 / 8, "model": 1 / 2}
    for name, want in expected.items():
        assert dims[name].value == pytest.approx(want), name
    assert dims["path"].sample_coverage == pytest.approx(1 - 2 / 4)
    assert dims["state"].sample_coverage == pytest.approx(1 - 3 / 13)
    assert report.overall == pytest.approx(math.prod(expected.values()) ** (1 / 5))
    # configured tools override the recorded definitions; no target models: n/a, not 1.0
    report = coverage_report(sets, tools_available=["add"])
    dims = {d.name: d for d in report.dimensions}
    assert dims["tool"].value == 1.0 and dims["model"].value is None and "model" in report.undefined


def test_openinference_tool_definitions(tmp_path, open_engine):
    schema = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"k": {"type": "string", "enum": ["x"]}}}}}
    write_lake(tmp_path, [span(1, 1, None, "ChatModel", 0, 1, {
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
        "llm.tools.0.tool.json_schema": json.dumps(schema)}, scope="openinference.instrumentation.langchain")])
    eng = open_engine(tmp_path)
    assert eng.query("SELECT tool_name, parameters FROM tool_definitions").to_pylist() == [
        {"tool_name": "lookup", "parameters": '{"properties":{"k":{"enum":["x"],"type":"string"}},"type":"object"}'}]


def test_tools_defined_come_from_the_chosen_trials_texts_only(tmp_path, open_engine):
    # coverage reads the distinct definition texts of the chosen trials and parses each once:
    # the same tools and schemas as the per-trial view gives for those trials, no others
    openai_shape = json.dumps([{"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "maxLength": 3}}}}}])
    oi_schema = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    write_lake(tmp_path, [
        *trial(1, "gpt-4o", [("add", {"a": 0})]),
        span(2, 1, None, "chat", 0, 1, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                        "gen_ai.tool.definitions": openai_shape}),
        span(2, 2, None, "chat", 2, 3, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                        "gen_ai.tool.definitions": "not json"}),
        span(3, 1, None, "ChatModel", 0, 1, {"openinference.span.kind": "LLM", "llm.model_name": "m",
                                             "llm.tools.0.tool.json_schema": json.dumps(oi_schema)},
             scope="openinference.instrumentation.langchain"),
    ])
    eng = open_engine(tmp_path)
    trace_ids = sorted(r[0] for r in eng.rows("SELECT trace_id FROM trials"))
    for picked in ([trace_ids[1]], [trace_ids[0], trace_ids[2]], trace_ids):
        eng.con.execute("CREATE OR REPLACE TEMP TABLE picked AS SELECT unnest(?::VARCHAR[]) AS trace_id", [picked])
        sets = coverage_sets(eng, "picked")
        per_trial = {r[0] for r in eng.rows("SELECT DISTINCT tool_name FROM tool_definitions SEMI JOIN picked "
                                            "USING (trace_id)")}
        assert sets.tools_defined == per_trial
    assert coverage_sets(eng).tools_defined == {"add", "search", "unused_tool", "lookup"}
    eng.con.execute("CREATE OR REPLACE TEMP TABLE picked AS SELECT ? AS trace_id", [trace_ids[1]])
    sets = coverage_sets(eng, "picked")
    assert sets.tools_defined == {"search"}
    assert sets.boundaries == {("search", "q", "maxLength=3"), ("search", "q", "empty")}
