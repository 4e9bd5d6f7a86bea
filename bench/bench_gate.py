"""Benchmark: `otel-assay gate` end to end on a generated lake.

Prints one JSON line. Generates (once, cached in --dir) a lake of --trials trials of 20 spans
each (a trial root, an agent span, nine LLM / tool step pairs), half version v1 and half v2,
over 20 scenarios, with vectorised pyarrow, written through `Lake.write`. v2 uses a
different tool mix and passes less often, so the gate has a regression to find. Then runs
the real CLI (`python -m otel_assay gate`) --runs times in a fresh process each (after one
run that warms the file cache) and reports the median and the spread of its wall time and
of its CPU time (user + system, which a busy machine disturbs less than wall time), and
its peak RSS. Target for a 40-trial lake: a median of at most 1 s of wall time.

Start-up is most of a small gate's time, and most of start-up is imports: whether Python
finds its compiled bytecode matters (PYTHONDONTWRITEBYTECODE=1 over an install that was
never compiled makes every run compile every module again). `bytecode_cached` says
whether the modules the gate imports had their .pyc files when the runs started.

    python bench/bench_gate.py --trials 40        # the fixed-cost target
    python bench/bench_gate.py                    # 100,000 trials, 2,000,000 spans, one run
    python bench/bench_gate.py --trials 10000     # small run
"""

from __future__ import annotations

import argparse
import json
import os
import importlib.util
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from otel_assay.lake.files import Lake
from otel_assay.lake.schema import SPANS_SCHEMA, STRING_MAP

T0 = 1_700_000_000_000_000_000
SPANS_PER_TRIAL = 20
TOOLS = np.array([f"tool_{i:02d}" for i in range(12)], object)


def _layout() -> tuple[np.ndarray, np.ndarray]:
    """(parent position, kind) per span position of a trial."""
    parents, kinds = [-1, 0], ["root", "agent"]
    while len(kinds) < SPANS_PER_TRIAL:
        parents += [1, 1]
        kinds += ["llm", "tool"]
    return np.array(parents[:SPANS_PER_TRIAL]), np.array(kinds[:SPANS_PER_TRIAL])


def _chunk(c0: int, nt: int, rng: np.random.Generator) -> pa.Table:
    parents, kinds = _layout()
    per = len(kinds)
    n = nt * per
    trial = np.repeat(np.arange(c0, c0 + nt), per)
    pos = np.tile(np.arange(per), nt)
    kind = np.tile(kinds, nt)
    is_llm, is_tool, is_root = kind == "llm", kind == "tool", kind == "root"
    v2 = (trial % 2) == 1
    trace_hex = np.repeat(np.char.mod("%032x", np.arange(c0, c0 + nt) * 7919 + 11), per)
    span_num = trial.astype(np.int64) * 64 + pos + 1
    span_hex = np.char.mod("%016x", span_num)
    par = np.tile(parents, nt)
    parent_hex = np.where(par >= 0, np.char.mod("%016x", trial.astype(np.int64) * 64 + par + 1), None)
    start = T0 + trial.astype(np.int64) * 2_000_000_000 + pos * 50_000_000
    dur = np.where(is_root | (kind == "agent"), (per - pos) * 50_000_000, 40_000_000).astype(np.int64)
    # v2 prefers the upper half of the tool list: its fingerprint moves
    tool_idx = rng.integers(0, 8, n) + np.where(v2, 4, 0)
    pass_p = np.where(v2[::per], 0.80, 0.90)
    outcome = np.where(rng.random(nt) < pass_p, "pass", "fail")[trial - c0]
    scenario = np.char.add("scenario-", ((trial // 2) % 20).astype(str))
    index = trial // 40
    cols = {
        "trace_id": trace_hex, "span_id": span_hex, "parent_span_id": parent_hex, "trace_state": None,
        "name": np.select([is_root, is_llm, is_tool], ["assay.trial", "chat m", "execute_tool"], "invoke_agent"),
        "kind": np.where(is_llm, 3, 1).astype(np.int8), "start_time_unix_nano": start, "duration_ns": dur,
        "status_code": np.zeros(n, np.int8), "status_message": None, "service_name": "bench-agent",
        "scope_name": "otel_assay", "scope_version": None,
        "op": np.select([is_llm, is_tool, kind == "agent"], ["chat", "execute_tool", "invoke_agent"], None),
        "agent_name": np.where(kind == "agent", "support", None), "tool_name": np.where(is_tool, TOOLS[tool_idx], None),
        "tool_call_id": np.where(is_tool, np.char.add("call_", span_hex), None),
        "model": np.where(is_llm, "gpt-4o-mini", None), "provider": np.where(is_llm, "openai", None),
        "run_id": np.where(v2, "run-v2", "run-v1"), "scenario": scenario, "version": np.where(v2, "v2", "v1"),
        "trial_index": index.astype(np.int64), "outcome": np.where(is_root, outcome, None), "score": None,
        "error_type": None, "error_class": None,
    }
    arrays = {}
    for field in SPANS_SCHEMA:
        v = cols.get(field.name)
        if field.name in ("input_tokens", "output_tokens"):
            hi = 3000 if field.name == "input_tokens" else 400
            arrays[field.name] = pa.array(rng.integers(20, hi, n), pa.int64(), mask=~is_llm)
        elif field.name in ("attributes", "resource_attributes"):
            arrays[field.name] = pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.string()),
                                                         pa.array([], pa.string())).cast(STRING_MAP)
        elif field.name.startswith("dropped_"):
            arrays[field.name] = pa.array(np.zeros(n, np.int32))
        elif v is None:
            arrays[field.name] = pa.nulls(n, field.type)
        elif isinstance(v, str):
            arrays[field.name] = pa.array(np.full(n, v, object), field.type)
        else:
            arrays[field.name] = pa.array(v, field.type)
    return pa.table(arrays, schema=SPANS_SCHEMA)


def generate(lake: Path, n_trials: int, chunk_trials: int = 20_000, seed: int = 7) -> int:
    rng = np.random.default_rng(seed)
    writer = Lake(lake)
    total = 0
    for c0 in range(0, n_trials, chunk_trials):
        table = _chunk(c0, min(chunk_trials, n_trials - c0), rng)
        writer.write({"spans": table}, fsync=False)
        total += table.num_rows
    return total


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _bytecode_cached() -> bool:
    """Whether the compiled bytecode of the heaviest modules the gate imports is on disk."""
    names = ("otel_assay.gate.run", "otel_assay.analyze.engine", "numpy", "scipy.special", "duckdb", "pyarrow")
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        cached = spec.cached
        if not cached or not os.path.exists(cached):
            return False
    return True


def _spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=None,
                    help="gate runs to time (default 10 up to 10,000 trials, else 1)")
    ap.add_argument("--dir", type=Path, default=None, help="lake directory (default /tmp/otel-assay-bench-gate-<trials>)")
    args = ap.parse_args()
    runs = args.runs if args.runs is not None else (10 if args.trials <= 10_000 else 1)
    if runs < 1:
        ap.error("--runs must be at least 1")
    lake = args.dir or Path(f"/tmp/otel-assay-bench-gate-{args.trials}")
    gen_s = None
    if not (lake / "spans").is_dir():
        t = time.perf_counter()
        generate(lake, args.trials)
        gen_s = round(time.perf_counter() - t, 2)
    out = lake.parent / f"{lake.name}-report.json"
    env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    argv = [sys.executable, "-m", "otel_assay", "gate", str(lake), "--baseline", "version=v1",
            "--candidate", "version=v2", "--json", str(out), "-q"]
    cached = _bytecode_cached()
    walls, cpus = [], []
    for i in range(runs + (1 if runs > 1 else 0)):
        cpu = _cpu_children()
        t = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t
        if runs > 1 and i == 0:
            continue  # the warm-up: the lake's files and the modules into the page cache
        walls.append(wall)
        cpus.append(_cpu_children() - cpu)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    report = json.loads(out.read_text()) if out.exists() else {}
    print(json.dumps({
        "bench": "gate", "trials": args.trials, "spans": args.trials * SPANS_PER_TRIAL, "scenarios": 20,
        "generate_s": gen_s, "runs": runs, "gate_wall_s": _spread(walls), "gate_cpu_s": _spread(cpus),
        "gate_peak_rss_mib": round(rss, 1), "exit_code": p.returncode, "decision": report.get("decision"),
        "bytecode_cached": cached, "cpus": os.cpu_count(),
        "stderr": p.stderr[-500:] if p.returncode not in (0, 1, 2) else None,
    }))


if __name__ == "__main__":
    main()
