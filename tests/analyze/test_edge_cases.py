"""Hand-built edge cases: broken trees, duplicates, spread trials, very large trials,
double instrumentation."""

from __future__ import annotations

import time

import pytest

from otel_assay.lake.rows import make_resource

from .conftest import rows
from .lakes import MS, T0, sid, span, tid, write_lake

TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}


def steps_of(eng, trace):
    return rows(eng, "SELECT span_id, step_parent_id, depth, seq, step_kind FROM steps WHERE trace_id = ? ORDER BY seq",
                [tid(trace)])


def test_orphan_spans_become_top_level(tmp_path, open_engine):
    write_lake(tmp_path, [
        span(1, 2, 99, "invoke_agent a", 1, 10, AGENT),   # parent 99 was never received
        span(1, 3, 2, "execute_tool t", 2, 3, TOOL),
    ])
    eng = open_engine(tmp_path)
    assert steps_of(eng, 1) == [
        {"span_id": sid(2), "step_parent_id": None, "depth": 1, "seq": 1, "step_kind": "agent"},
        {"span_id": sid(3), "step_parent_id": sid(2), "depth": 2, "seq": 2, "step_kind": "tool"},
    ]


def test_cycle_in_parent_links_terminates(tmp_path, open_engine):
    write_lake(tmp_path, [
        span(1, 1, None, "invoke_agent a", 0, 10, AGENT),
        span(1, 2, 1, "execute_tool t", 1, 2, TOOL),
        span(1, 3, 4, "execute_tool t", 3, 4, TOOL),     # 3 -> 4 -> 3
        span(1, 4, 3, "execute_tool t", 5, 6, TOOL),
    ])
    eng = open_engine(tmp_path)
    got = steps_of(eng, 1)
    assert [r["span_id"] for r in got] == [sid(1), sid(2), sid(3), sid(4)]
    assert [(r["step_parent_id"], r["depth"]) for r in got] == [(None, 1), (sid(1), 2), (None, 1), (None, 1)]
    assert rows(eng, "SELECT n_steps FROM trials")[0]["n_steps"] == 4


def test_duplicate_span_ids_count_once(tmp_path, open_engine):
    spans = [
        span(1, 1, None, "invoke_agent a", 0, 10, AGENT),
        span(1, 2, 1, "execute_tool t", 1, 2, TOOL),
        span(1, 3, 2, "execute_tool t", 3, 4, TOOL),
    ]
    write_lake(tmp_path, spans, token="a")
    write_lake(tmp_path, spans[1:], token="b")            # a retransmission in another file
    # a broken emitter reusing id 2 with a parent below it: would loop if both copies were kept
    write_lake(tmp_path, [span(1, 2, 3, "execute_tool t", 5, 6, TOOL)], token="c")
    eng = open_engine(tmp_path)
    assert rows(eng, "SELECT count(*) AS n FROM spans")[0]["n"] == 6
    assert [(r["span_id"], r["depth"]) for r in steps_of(eng, 1)] == [(sid(1), 1), (sid(2), 2), (sid(3), 3)]
    assert rows(eng, "SELECT n_steps, n_tool FROM trials")[0] == {"n_steps": 3, "n_tool": 2}


def test_trial_spread_over_files_and_partitions(tmp_path, open_engine):
    day = 86_400_000  # ms
    write_lake(tmp_path, [span(1, 1, None, "invoke_agent a", 0, day + 10, {**AGENT, "assay.scenario": "s"}),
                          span(1, 2, 1, "execute_tool t", 1, 2, TOOL)], token="one")
    write_lake(tmp_path, [span(1, 3, 1, "execute_tool t", day + 1, day + 2, TOOL)], token="two")
    parts = sorted(p.parent.name for p in (tmp_path / "spans").glob("dt=*/*.parquet"))
    assert parts == ["dt=2023-11-14", "dt=2023-11-15"]
    eng = open_engine(tmp_path)
    assert [(r["span_id"], r["seq"], r["depth"]) for r in steps_of(eng, 1)] == [(sid(1), 1, 1), (sid(2), 2, 2), (sid(3), 3, 2)]
    t = rows(eng, "SELECT scenario, n_steps, duration_ns FROM trials")[0]
    assert t == {"scenario": "s", "n_steps": 3, "duration_ns": (day + 10) * MS}
    # a list of files works as well as the directory
    files = sorted((tmp_path / "spans").glob("dt=*/*.parquet"))
    assert rows(open_engine(files), "SELECT n_steps FROM trials")[0]["n_steps"] == 3


def test_fifty_thousand_step_trial(tmp_path, open_engine):
    n = 50_000
    res = make_resource([("service.name", "big")])

    def s(i, parent, name, attrs):
        return dict(trace_id=tid(7), span_id=sid(i), parent_span_id=sid(parent) if parent else None, name=name,
                    kind=0, start_time_unix_nano=T0 + i * 1000, end_time_unix_nano=T0 + i * 1000 + 500,
                    status_code=0, status_message=None, trace_state=None, scope_name="otel_assay",
                    scope_version=None, resource=res, attributes=attrs)

    tool_attrs = list(TOOL.items())
    spans = [s(1, None, "invoke_agent a", list(AGENT.items()))]
    spans += [s(i, 1, "execute_tool t", tool_attrs) for i in range(2, n + 1)]
    spans[0]["end_time_unix_nano"] = T0 + (n + 1) * 1000
    write_lake(tmp_path, spans)
    eng = open_engine(tmp_path)
    t0 = time.perf_counter()
    t = rows(eng, "SELECT n_steps, n_tool FROM trials")[0]
    f = rows(eng, "SELECT n_steps, max_depth, n_branches, frac_tool FROM fingerprints")[0]
    elapsed = time.perf_counter() - t0
    assert t == {"n_steps": n, "n_tool": n - 1}
    # the agent is a container: n - 1 work steps, all of them tool calls
    assert f == {"n_steps": n - 1, "max_depth": 2, "n_branches": n - 1, "frac_tool": 1.0}
    assert rows(eng, "SELECT max(seq) AS m FROM steps")[0]["m"] == n
    assert elapsed < 60


def test_deep_chain(tmp_path, open_engine):
    depth = 300
    write_lake(tmp_path, [span(1, i, i - 1 if i > 1 else None, "invoke_agent a", i, 2 * depth - i, AGENT)
                          for i in range(1, depth + 1)])
    eng = open_engine(tmp_path)
    f = rows(eng, "SELECT max_depth, n_branches FROM fingerprints")[0]
    assert f == {"max_depth": depth, "n_branches": 1}


def test_double_instrumentation_counts_once(tmp_path, open_engine):
    """AutoGen native + OpenInference's autogen-agentchat instrumentor both emit the agent and
    the tool call (instrumentation.md §3); the native span wins and takes the arguments the
    OpenInference span recorded."""
    oi = "openinference.instrumentation.autogen_agentchat"
    write_lake(tmp_path, [
        span(1, 1, None, "calc.on_messages_stream", 0, 100,
             {"openinference.span.kind": "AGENT", "agent.name": "calc"}, scope=oi),
        span(1, 2, 1, "invoke_agent calc", 1, 99,
             {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "calc", "gen_ai.system": "autogen"},
             scope="autogen-core"),
        span(1, 3, 2, "calc.add", 10, 20,
             {"openinference.span.kind": "TOOL", "tool.name": "add", "tool.parameters": '{"a": 2, "b": 3}'}, scope=oi),
        span(1, 4, 3, "execute_tool add", 11, 19,
             {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add", "gen_ai.tool.call.id": "call_1",
              "gen_ai.system": "autogen"}, scope="autogen-core"),
        # two parallel calls from one convention are two steps, not duplicates
        span(1, 5, 2, "execute_tool add", 30, 40, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add",
                                                   "gen_ai.tool.call.id": "call_2"}, scope="autogen-core"),
        span(1, 6, 2, "execute_tool add", 31, 39, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add",
                                                   "gen_ai.tool.call.id": "call_3"}, scope="autogen-core"),
    ])
    eng = open_engine(tmp_path)
    got = rows(eng, "SELECT span_id, step_kind, source_convention, depth, step_parent_id, tool_call_id, tool_args, "
                    "agent_name FROM steps ORDER BY seq")
    assert [(r["span_id"], r["step_kind"], r["source_convention"], r["depth"]) for r in got] == [
        (sid(2), "agent", "autogen_native", 1), (sid(4), "tool", "autogen_native", 2),
        (sid(5), "tool", "autogen_native", 2), (sid(6), "tool", "autogen_native", 2)]
    tool = got[1]
    assert (tool["step_parent_id"], tool["tool_call_id"], tool["tool_args"], tool["agent_name"]) == (
        sid(2), "call_1", '{"a":2,"b":3}', "calc")


def _compress_cache(monkeypatch, compressed: bool) -> None:
    """Make Engine.materialize hold `steps` compressed (as on a lake too large for memory)
    or as a temporary table (as on a small one), whatever the lake's size."""
    from otel_assay.analyze import engine as engine_mod

    monkeypatch.setattr(engine_mod, "CACHED_STEP_BYTES", 1 << 50 if compressed else 0)


def _mixed_lake(tmp_path):
    """Every recorded dialect, duplicates, orphans, a cycle."""
    from pathlib import Path

    from .lakes import write_otlp_json

    write_otlp_json(tmp_path, *sorted((Path(__file__).parent.parent / "fixtures" / "otlp").glob("*.json")))
    edge = [span(t, 1, None, "invoke_agent a", 0, 10, AGENT) for t in range(1, 30)]
    edge += [span(t, 2, 1, "execute_tool t", 1, 2, TOOL) for t in range(1, 30)]
    edge += [span(40, 3, 99, "execute_tool t", 1, 2, TOOL),                          # orphan
             span(41, 3, 4, "execute_tool t", 3, 4, TOOL), span(41, 4, 3, "execute_tool t", 5, 6, TOOL)]  # cycle
    write_lake(tmp_path, edge, token="a")
    write_lake(tmp_path, edge[:5], token="b")                                          # duplicate span ids


@pytest.mark.parametrize("compressed", [False, True])
def test_steps_built_in_parts_equal_steps_in_one_go(tmp_path, open_engine, monkeypatch, compressed):
    """On a large lake Engine.materialize builds `steps` per trace-id range; the parts must
    add up to exactly the view's rows: every dialect, duplicates, orphans, a cycle."""
    from otel_assay.analyze import engine as engine_mod

    _mixed_lake(tmp_path)
    columns = "trace_id, span_id, step_parent_id, depth, seq, step_kind, agent_name, tool_name, tool_args, model, " \
              "input_tokens, cost_usd, output_text"
    whole = rows(open_engine(tmp_path), f"SELECT {columns} FROM steps ORDER BY trace_id, seq")

    _compress_cache(monkeypatch, compressed)
    eng = open_engine(tmp_path)
    limit = engine_mod._bytes(eng.rows("SELECT current_setting('memory_limit')")[0][0])
    monkeypatch.setattr(engine_mod, "STEPS_BYTES_PER_SPAN", limit // 3 // 7)   # 7 spans per part
    eng.materialize()
    assert eng.steps_parts > 10
    assert eng.cached_table("steps").startswith("_assay_cache." if compressed else "temp.")
    parts = rows(eng, f"SELECT {columns} FROM steps ORDER BY trace_id, seq")
    assert len(whole) > 80 and parts == whole

    # a user's price table, read by every connection that builds a part
    prices = tmp_path / "prices.csv"
    prices.write_text("provider,model,input_usd_per_mtok,output_usd_per_mtok\n,gpt-4o,1000000,0\n")
    whole = rows(open_engine(tmp_path, prices=prices), f"SELECT {columns} FROM steps ORDER BY trace_id, seq")
    eng = open_engine(tmp_path, prices=prices)
    eng.materialize()
    assert eng.steps_parts > 10
    assert rows(eng, f"SELECT {columns} FROM steps ORDER BY trace_id, seq") == whole
    assert any(r["cost_usd"] for r in whole)


@pytest.mark.parametrize("compressed", [False, True])
def test_steps_interrupted_between_parts_are_built_afresh(tmp_path, open_engine, monkeypatch, compressed):
    """Ctrl-C (or a part that runs out of memory) while `steps` is built in parts: `steps`
    must not be left reading the parts built so far, and the next materialize builds it
    whole. It used to switch the view to the table after the first part."""
    import os
    import signal
    import threading

    from otel_assay.analyze import engine as engine_mod

    spans = []
    for t in range(1, 301):
        spans.append(span(t, 1, None, "invoke_agent a", 0, 100, AGENT))
        spans += [span(t, k, 1, "execute_tool t", k, k + 1, TOOL) for k in range(2, 12)]
    write_lake(tmp_path, spans)
    _compress_cache(monkeypatch, compressed)
    eng = open_engine(tmp_path)
    limit = engine_mod._bytes(eng.rows("SELECT current_setting('memory_limit')")[0][0])
    monkeypatch.setattr(engine_mod, "STEPS_BYTES_PER_SPAN", limit // 3 // 30)   # 30 spans per part
    from otel_assay.errors import interrupted

    # a process started in the background (a CI runner may start the tests so) inherits
    # SIGINT ignored; Ctrl-C at a terminal raises KeyboardInterrupt, as here
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises((KeyboardInterrupt, RuntimeError)) as e:
            eng.materialize(["steps"])
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert interrupted(e.value), e.value
    built = eng.rows(f"SELECT count(*) FROM {'_assay_cache' if compressed else 'temp'}._cached_steps")[0][0]
    assert 0 < built < len(spans), "the interrupt came before the first part or after the last: resize the lake"
    assert "steps" not in eng.materialized
    assert eng.rows("SELECT count(*) FROM steps")[0][0] == len(spans)
    eng.materialize(["steps"])
    assert eng.steps_parts > 10
    assert eng.rows("SELECT count(*), count(DISTINCT span_id || trace_id) FROM steps")[0] == (len(spans), len(spans))


def test_compressed_cache_answers_as_the_temporary_table(tmp_path, open_engine, monkeypatch):
    """`steps` held compressed (a lake too large for memory) must answer every view and
    every restriction to selected trials exactly as the temporary table does."""
    from otel_assay.analyze.coverage import coverage_sets

    _mixed_lake(tmp_path)
    answers = {}
    for compressed in (False, True):
        _compress_cache(monkeypatch, compressed)
        eng = open_engine(tmp_path)
        eng.materialize()
        assert eng.cached_table("steps").startswith("_assay_cache." if compressed else "temp.")
        eng.con.execute("CREATE TEMP TABLE chosen AS SELECT trace_id FROM trials ORDER BY trace_id LIMIT 20")
        every = coverage_sets(eng)
        chosen = coverage_sets(eng, "chosen")
        eng.restrict_trials("chosen")
        answers[compressed] = (
            rows(eng, "SELECT * EXCLUDE (tool_args) FROM steps ORDER BY trace_id, seq"),
            rows(eng, "SELECT * FROM trials ORDER BY trace_id"),
            rows(eng, "SELECT * FROM fingerprints ORDER BY trace_id"),
            rows(eng, "SELECT * FROM pass_rates ORDER BY scenario, version"),
            every, chosen)
        eng.close()
    plain, packed = answers[False], answers[True]
    assert len(plain[0]) > 80 and len(plain[1]) == 20 and plain[4].n_trials > 20 and plain[5].n_trials == 20
    assert plain[4] != plain[5]
    assert packed == plain


def test_spans_without_a_trace_id_make_no_trial(tmp_path, open_engine):
    # a foreign writer's file: the lake's own writers reject spans without a trace id
    import pyarrow as pa
    import pyarrow.parquet as pq

    from otel_assay.lake.schema import SPANS_SCHEMA

    write_lake(tmp_path / "lake", [span(1, 1, None, "assay.trial s", 0, 10, {"assay.scenario": "s",
                                                                              "assay.trial.outcome": "pass"}),
                                   span(1, 2, 1, "execute_tool t", 1, 2, TOOL)])
    cols = {"trace_id": [None, None], "span_id": [sid(7), sid(8)], "parent_span_id": [None, sid(7)],
            "name": ["assay.trial s", "execute_tool t"], "start_time_unix_nano": [T0, T0 + MS],
            "duration_ns": [10 * MS, MS], "scenario": ["s", "s"], "op": [None, "execute_tool"], "tool_name": [None, "t"]}
    pq.write_table(pa.table({f.name: pa.array(cols.get(f.name, [None, None]), f.type) for f in SPANS_SCHEMA}),
                   tmp_path / "foreign.parquet")
    eng = open_engine([tmp_path / "lake", tmp_path / "foreign.parquet"])
    assert rows(eng, "SELECT count(*) AS n FROM spans")[0]["n"] == 4
    assert rows(eng, "SELECT trace_id FROM trials") == [{"trace_id": tid(1)}]
    assert rows(eng, "SELECT n_trials, n_empty_run FROM pass_rates") == [{"n_trials": 1, "n_empty_run": 0}]


def test_a_trial_cost_is_the_same_in_every_run(tmp_path, open_engine):
    """A sum of doubles depends on the order DuckDB's threads combine their partial sums:
    a trial spread over eight files cost a different last few digits in every run."""
    import random

    rng = random.Random(3)
    sid = 2
    for f in range(8):
        spans = [span(1, 1, None, "invoke_agent a", 0, 10_000_000, {"gen_ai.operation.name": "invoke_agent"})] if not f else []
        for _ in range(2000):
            spans.append(span(1, sid, 1, "chat m", sid, sid + 0.5, {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "llm.cost.total": repr(rng.random() * 1e-3)}))
            sid += 1
        write_lake(tmp_path / "lake", spans, token=f"f{f}")
    # and costs no decimal holds (a hostile attribute) are summed, not an error
    write_lake(tmp_path / "lake", [span(2, 1, None, "chat m", 0, 1, {"gen_ai.operation.name": "chat", "llm.cost.total": "1e30"}),
                                   span(3, 1, None, "chat m", 0, 1, {"gen_ai.operation.name": "chat", "llm.cost.total": "inf"})],
               token="hostile")
    costs = set()
    for _ in range(6):
        eng = open_engine(tmp_path / "lake")
        eng.con.execute("SET threads = 2")
        got = dict(eng.rows("SELECT trace_id, cost_usd FROM trials"))
        costs.add(got[tid(1)])
        assert got[tid(2)] == 1e30 and got[tid(3)] == float("inf")
    assert len(costs) == 1


def test_costs_that_each_fit_a_decimal_but_not_their_sum_are_summed_not_an_error(tmp_path, open_engine):
    """5e19 fits DECIMAL(38, 18), three of them do not: DuckDB sums the decimal branch of the
    trial's cost for every trial, and the overflow failed every query over trials."""
    write_lake(tmp_path / "lake", [span(1, 1, None, "invoke_agent a", 0, 10, {"gen_ai.operation.name": "invoke_agent"})]
               + [span(1, 1 + k, 1, "chat m", k, k + 0.5, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                                            "llm.cost.total": "5e19"}) for k in (1, 2, 3)]
               + [span(2, 1, None, "chat m", 0, 1, {"gen_ai.operation.name": "chat", "llm.cost.total": "0.25"})])
    got = dict(open_engine(tmp_path / "lake").rows("SELECT trace_id, cost_usd FROM trials"))
    assert got == {tid(1): 1.5e20, tid(2): 0.25}


def test_a_glob_over_a_lake_during_compaction_grace_reads_each_span_once(tmp_path, open_engine):
    """A glob matched the merged file and the files it replaces until they were deleted:
    every span was counted twice. Old files named without the merged one are still read."""
    from otel_assay.lake.files import Lake

    lake = tmp_path / "lake"
    for t in range(1, 5):
        write_lake(lake, [span(t, 1, None, "chat m", 0, 1, {"gen_ai.operation.name": "chat"}),
                          span(t, 2, 1, "execute_tool x", 0.2, 0.5, {"gen_ai.operation.name": "execute_tool"})],
                   token=f"t{t}")
    old = sorted(Lake(lake).live_files())
    assert Lake(lake).compact(grace_seconds=3600).files_out == 1
    assert len(list((lake / "spans").rglob("*.parquet"))) == 5  # four replaced files still there
    glob = str(lake / "spans" / "**" / "*.parquet")
    for source in (lake, glob):
        assert open_engine(source).rows("SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans")[0] == (8, 8)
        assert open_engine(source).rows("SELECT count(*) FROM trials")[0][0] == 4
    assert open_engine(old).rows("SELECT count(*) FROM spans")[0][0] == 8  # the old files alone: all theirs


def test_a_glob_relative_to_the_table_directory_during_compaction_grace_reads_each_span_once(
        tmp_path, open_engine, monkeypatch):
    """Run inside LAKE/spans, `*/*.parquet` names neither the table nor the lake: the
    replaced files were read along with the merged one."""
    from otel_assay.lake.files import Lake

    lake = tmp_path / "lake"
    for t in range(1, 5):
        write_lake(lake, [span(t, 1, None, "chat m", 0, 1, {"gen_ai.operation.name": "chat"})], token=f"t{t}")
    assert Lake(lake).compact(grace_seconds=3600).files_out == 1
    monkeypatch.chdir(lake / "spans")
    for glob in ("*/*.parquet", "../spans/*/*.parquet"):
        assert open_engine(glob).rows("SELECT count(*), count(DISTINCT trace_id) FROM spans")[0] == (4, 4), glob


def test_a_file_removed_after_the_lake_was_listed_is_a_data_error_not_a_bug(tmp_path, open_engine):
    # what `compact --grace-seconds 0` does to a reader that listed the lake a moment before
    import duckdb

    write_lake(tmp_path, [span(1, 1, None, "invoke_agent a", 0, 10, {**AGENT, "assay.scenario": "s"})], token="one")
    write_lake(tmp_path, [span(1, 2, 1, "execute_tool t", 1, 2, TOOL)], token="two")
    eng = open_engine(tmp_path)
    for f in (tmp_path / "spans").glob("dt=*/*.parquet"):
        f.unlink()
    with pytest.raises(duckdb.IOException):  # which the commands report as exit 4, not as a failed view
        eng.con  # binds the views not created yet, over the files listed at open
