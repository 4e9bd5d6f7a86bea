"""Benchmark: trials + fingerprints + coverage sets over a generated span lake.

Prints one JSON line. Generates (once, cached in --dir) a lake of --trials trials of
--spans-per-trial spans each in the lake schema, with pyarrow vectorised code: a trial
root span (assay.* attributes), an agent span, then LLM / tool step pairs, every third
pair under a sub-agent (so depth varies), 30 tools, 4 models, errors on 2 % of tool calls.

    python bench/bench_views.py                       # 10M spans in 500k trials
    python bench/bench_views.py --trials 5000         # small run
    python bench/bench_views.py --step-files          # with step files (as after `otel-assay compact`)

With --step-files the lake's files get their step files first (analyze/stepfiles.py; timed
once as step_files_s, the cost compaction pays), and the analysis reads them instead of
computing `steps`. Without it every step is computed from the spans.

The floor is one `GROUP BY trace_id` scan of the same files (count, min start, max end,
sum tokens): the least any per-trial analysis must do.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from otel_assay.lake.files import write_parquet_atomic
from otel_assay.lake.schema import SPANS_SCHEMA

T0 = 1_700_000_000_000_000_000
TOOLS = [f"tool_{i:02d}" for i in range(30)]
MODELS = ["gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet", "scripted-model-x"]
TOOL_DEFS = json.dumps([{"type": "function", "name": t, "parameters": {
    "type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 100}}}} for t in TOOLS[:10]],
    separators=(",", ":"))


def _template(n_spans: int):
    """Per-trial span layout: (parent position, kind) for each position."""
    parents, kinds = [-1, 0], ["root", "agent"]
    pos, pair = 2, 0
    sub = None
    while pos < n_spans:
        if pair % 3 == 2 and pos + 2 < n_spans and sub is None:
            parents.append(1)
            kinds.append("agent")
            sub = pos
            pos += 1
            continue
        parent = sub if sub is not None else 1
        for kind in ("llm", "tool"):
            if pos < n_spans:
                parents.append(parent)
                kinds.append(kind)
                pos += 1
        if sub is not None:
            sub = None
        pair += 1
    return np.array(parents), np.array(kinds)


def _map_array(n_rows: int, rows: np.ndarray, keys: list[np.ndarray], values: list[pa.Array]) -> pa.MapArray:
    """A MAP column with entries only on `rows` (sorted row indices), one entry per key."""
    counts = np.zeros(n_rows, np.int32)
    counts[rows] = len(keys)
    offsets = np.zeros(n_rows + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    k = pa.array(np.stack(keys, axis=1).reshape(-1) if keys else np.array([], object), pa.string())
    v = pa.concat_arrays([pa.array(vv, pa.string()) for vv in values]) if values else pa.array([], pa.string())
    if values:
        # interleave values row by row: entry j of row i at position i*len(keys)+j
        idx = np.arange(len(rows) * len(keys)).reshape(len(keys), len(rows)).T.reshape(-1)
        v = v.take(pa.array(idx))
    return pa.MapArray.from_arrays(pa.array(offsets), k, v)


def generate(lake: Path, n_trials: int, spans_per_trial: int, chunk_trials: int = 25_000, seed: int = 7) -> int:
    rng = np.random.default_rng(seed)
    parents, kinds = _template(spans_per_trial)
    n_per = len(kinds)
    arg_pool = np.array([json.dumps({"n": int(i % 101), "q": f"query {i}"}) for i in range(200)], object)
    out = lake / "spans" / "dt=2023-11-14"
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for c0 in range(0, n_trials, chunk_trials):
        nt = min(chunk_trials, n_trials - c0)
        n = nt * n_per
        trial = np.repeat(np.arange(c0, c0 + nt), n_per)
        pos = np.tile(np.arange(n_per), nt)
        kind = np.tile(kinds, nt)
        par = np.tile(parents, nt)
        trace_hex = np.repeat(np.char.add("5eed", np.char.mod("%028x", np.arange(c0, c0 + nt) * 7919 + 1)), n_per)
        span_num = trial.astype(np.int64) * 64 + pos + 1
        span_hex = np.char.mod("%016x", span_num)
        parent_hex = np.where(par >= 0, np.char.mod("%016x", trial.astype(np.int64) * 64 + par + 1), None)
        start = T0 + trial.astype(np.int64) * 10_000_000_000 + pos * 100_000_000
        dur = np.where(kind == "root", n_per * 100_000_000, np.where(kind == "agent", (n_per - pos) * 100_000_000 - 1, 90_000_000))
        is_llm, is_tool = kind == "llm", kind == "tool"
        version = np.where(trial % 2 == 0, "v1", "v2")
        scenario = np.char.add("scenario_", (trial % 20).astype(str))
        tool = np.where(is_tool, np.array(TOOLS, object)[rng.integers(0, 30, n)], None)
        model_idx = np.where(trial % 50 == 0, 3, (trial + pos) % 3)
        model = np.where(is_llm, np.array(MODELS, object)[model_idx], None)
        op = np.select([is_llm, is_tool, kind == "agent"], ["chat", "execute_tool", "invoke_agent"], None).astype(object)
        op[kind == "root"] = None
        status = np.where(is_tool & (rng.random(n) < 0.02), 2, 0).astype(np.int8)
        outcome = np.where(rng.random(nt) < 0.8, "pass", "fail")[trial - c0]
        cols = {
            "trace_id": pa.array(trace_hex, pa.string()),
            "span_id": pa.array(span_hex, pa.string()),
            "parent_span_id": pa.array(parent_hex, pa.string()),
            "trace_state": pa.nulls(n, pa.string()),
            "name": pa.array(np.select([kind == "root", is_llm, is_tool], ["assay.trial", "chat", "execute_tool"], "invoke_agent"), pa.string()),
            "kind": pa.array(np.where(is_llm, 3, 1).astype(np.int8)),
            "start_time_unix_nano": pa.array(start, pa.int64()),
            "duration_ns": pa.array(dur.astype(np.int64)),
            "status_code": pa.array(status),
            "status_message": pa.nulls(n, pa.string()),
            "service_name": pa.array(np.full(n, "bench-agent", object), pa.string()),
            "scope_name": pa.array(np.full(n, "otel_assay", object), pa.string()),
            "scope_version": pa.nulls(n, pa.string()),
            "op": pa.array(op, pa.string()),
            "agent_name": pa.array(np.where(kind == "agent", np.where(pos == 1, "planner", "worker"), None), pa.string()),
            "tool_name": pa.array(tool, pa.string()),
            "tool_call_id": pa.array(np.where(is_tool, np.char.add("call_", span_hex), None), pa.string()),
            "model": pa.array(model, pa.string()),
            "provider": pa.array(np.where(is_llm, "openai", None), pa.string()),
            "input_tokens": pa.array(np.where(is_llm, rng.integers(50, 3000, n), 0), pa.int64(), mask=~is_llm),
            "output_tokens": pa.array(np.where(is_llm, rng.integers(5, 500, n), 0), pa.int64(), mask=~is_llm),
            "error_type": pa.array(np.where(status == 2, "ToolError", None), pa.string()),
            "run_id": pa.array(np.full(n, "bench-run", object), pa.string()),
            "scenario": pa.array(scenario, pa.string()),
            "version": pa.array(version, pa.string()),
            "trial_index": pa.array(trial.astype(np.int64)),
            "outcome": pa.array(outcome, pa.string()),
            "score": pa.nulls(n, pa.float64()),
            "error_class": pa.nulls(n, pa.string()),
        }
        tool_rows = np.flatnonzero(is_tool)
        first_llm = np.flatnonzero(is_llm & (pos == np.flatnonzero(kinds == "llm")[0]))
        last_llm = np.flatnonzero(is_llm & (pos == np.flatnonzero(kinds == "llm")[-1]))
        rows = np.concatenate([tool_rows, first_llm, last_llm])
        order = np.argsort(rows, kind="stable")
        keys = np.concatenate([np.full(len(tool_rows), "gen_ai.tool.call.arguments", object),
                               np.full(len(first_llm), "gen_ai.tool.definitions", object),
                               np.full(len(last_llm), "gen_ai.output.messages", object)])[order]
        values = np.concatenate([arg_pool[rng.integers(0, 200, len(tool_rows))],
                                 np.full(len(first_llm), TOOL_DEFS, object),
                                 np.full(len(last_llm), '[{"role":"assistant","parts":[{"type":"text","content":"Done. The result is ready."}],"finish_reason":"stop"}]', object)])[order]
        cols["attributes"] = _map_array(n, rows[order], [keys], [values])
        cols["resource_attributes"] = _map_array(n, np.array([], np.int64), [], [])
        for c in ("dropped_attributes_count", "dropped_events_count", "dropped_links_count"):
            cols[c] = pa.array(np.zeros(n, np.int32))
        table = pa.table(cols).cast(SPANS_SCHEMA)
        write_parquet_atomic(table, out / f"part-{c0 // chunk_trials:05d}.parquet", fsync=False)
        total += n
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=500_000)
    ap.add_argument("--spans-per-trial", type=int, default=20)
    ap.add_argument("--dir", type=Path, default=None, help="lake directory (default /tmp/otel-assay-bench-<trials>)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--memory-limit", default="3GB")
    ap.add_argument("--step-files", action="store_true", help="write the lake's step files, then read them")
    args = ap.parse_args()
    lake = args.dir or Path(f"/tmp/otel-assay-bench-{args.trials}x{args.spans_per_trial}")
    gen_s = None
    if not (lake / "spans").is_dir():
        t = time.perf_counter()
        generate(lake, args.trials, args.spans_per_trial)
        gen_s = round(time.perf_counter() - t, 2)

    from otel_assay.analyze.coverage import coverage_sets
    from otel_assay.analyze.engine import Engine
    from otel_assay.analyze.stepwrite import write_step_files

    step_files_s = None
    if args.step_files:
        t = time.perf_counter()
        write_step_files(lake, threads=args.threads, memory_limit=args.memory_limit)
        step_files_s = round(time.perf_counter() - t, 2)

    t = time.perf_counter()
    # opening checks the step files and finds the trials split across files: part of the total
    with Engine(lake, threads=args.threads, memory_limit=args.memory_limit, step_files=args.step_files) as eng:
        open_s = time.perf_counter() - t
        stored = len(eng.step_files)
        split = eng.rows("SELECT count(*) FROM _split_trials")[0][0]
        t = time.perf_counter()
        eng.query("SELECT count(*) AS n FROM (SELECT trace_id, count(*), min(start_time_unix_nano), "
                          "max(start_time_unix_nano + duration_ns), sum(input_tokens) FROM spans GROUP BY trace_id)")
        floor_s = time.perf_counter() - t
        n_spans = eng.query("SELECT count(*) AS n FROM spans")["n"][0].as_py()

        timings = {}
        t0 = time.perf_counter()
        try:
            eng.materialize(["steps"])
        except duckdb.OutOfMemoryException as e:
            print(json.dumps({"bench": "views", "spans": n_spans, "threads": args.threads,
                              "memory_limit": args.memory_limit, "error": str(e).splitlines()[0],
                              "after_s": round(time.perf_counter() - t0, 2)}))
            raise SystemExit(1) from None
        timings["steps"] = time.perf_counter() - t0
        t = time.perf_counter()
        eng.materialize(["trials"])  # as every command does: fingerprints and coverage read it
        trials = eng.query("SELECT * FROM trials")
        timings["trials"] = time.perf_counter() - t
        t = time.perf_counter()
        fps = eng.query("SELECT * FROM fingerprints")
        timings["fingerprints"] = time.perf_counter() - t
        t = time.perf_counter()
        sets = coverage_sets(eng)
        timings["coverage_sets"] = time.perf_counter() - t
        total = time.perf_counter() - t0 + open_s

    print(json.dumps({
        "bench": "views", "spans": n_spans, "memory_limit": args.memory_limit, "trials": trials.num_rows, "fingerprints": fps.num_rows,
        "distinct_paths": len(sets.path_counts), "threads": args.threads, "steps_parts": eng.steps_parts, "generate_s": gen_s,
        "step_files": stored, "split_trials": split, "step_files_s": step_files_s,
        "total_s": round(total, 2), "open_s": round(open_s, 2), **{f"{k}_s": round(v, 2) for k, v in timings.items()},
        "floor_group_by_s": round(floor_s, 2), "ratio_to_floor": round(total / floor_s, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }))


if __name__ == "__main__":
    main()
