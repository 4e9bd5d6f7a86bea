"""Benchmark: a gate over 2 of 100 versions against the same gate on a lake of only those 2.

Prints one JSON line. A team's lake keeps months of versions; a gate compares two of them.
Generates (once, cached under --dir) two lakes with bench_gate's generator, 10 spans per
trial: the big one holds --versions versions of --trials-per-version trials each, every
version written as the run that recorded it writes (its own files); the small one holds the
same files of the two versions the gate compares. Then runs the real CLI
(`python -m otel_assay gate LAKE --baseline version=A --candidate version=B`) --runs times
on each, after one warm-up run each, and reports the median wall and CPU time of both and
their ratio. Target: the big lake's gate within 1.5 times the small lake's.

    python bench/bench_select.py                       # 100 versions x 160 trials (160,000 spans)
    python bench/bench_select.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import bench_gate
from bench_gate import _chunk, _cpu_children

from otel_assay.lake.files import Lake

SPANS_PER_TRIAL = 10


def _version_table(k: int, n_trials: int, rng: np.random.Generator) -> pa.Table:
    """Version k's trials: bench_gate's trials (odd versions pass less often and use another
    tool mix), with trace ids, version and run of their own."""
    table = _chunk(k * n_trials, n_trials, rng)
    version = pa.array(np.full(table.num_rows, f"v{k:03d}", object), pa.string())
    run = pa.array(np.full(table.num_rows, f"run-{k:03d}", object), pa.string())
    table = table.set_column(table.schema.get_field_index("version"), "version", version)
    return table.set_column(table.schema.get_field_index("run_id"), "run_id", run)


def generate(root: Path, versions: int, per_version: int, pair: tuple[int, int]) -> tuple[Path, Path]:
    """The big lake and the lake of ``pair``'s versions only (the same files)."""
    big, small = root / "all", root / "pair"
    if (big / "spans").is_dir() and (small / "spans").is_dir():
        return big, small
    shutil.rmtree(root, ignore_errors=True)
    bench_gate.SPANS_PER_TRIAL = SPANS_PER_TRIAL  # _chunk's trial shape
    rng = np.random.default_rng(7)
    lake = Lake(big)
    for k in range(versions):
        before = set((big / "spans").rglob("*.parquet")) if (big / "spans").is_dir() else set()
        lake.write({"spans": _version_table(k, per_version, rng)}, fsync=False)
        if k in pair:
            for f in set((big / "spans").rglob("*.parquet")) - before:
                dest = small / f.relative_to(big)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, dest)
    return big, small


def _time(argv: list[str], runs: int, env: dict) -> tuple[list[float], list[float], subprocess.CompletedProcess]:
    walls, cpus = [], []
    p = subprocess.run(argv, capture_output=True, text=True, env=env)  # warm-up
    for _ in range(runs):
        cpu = _cpu_children()
        t = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - t)
        cpus.append(_cpu_children() - cpu)
    return walls, cpus, p


def _same(a, b) -> bool:
    """Equal, floats to the last digits that DuckDB's parallel sums may move."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--versions", type=int, default=100)
    ap.add_argument("--trials-per-version", type=int, default=160)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="where the lakes go (default /tmp/otel-assay-bench-select-...)")
    args = ap.parse_args()
    if args.versions < 2 or args.runs < 1:
        ap.error("--versions must be at least 2 and --runs at least 1")
    root = args.dir or Path(f"/tmp/otel-assay-bench-select-{args.versions}x{args.trials_per_version}")
    pair = (args.versions // 2 - 1, args.versions // 2)  # two neighbours in the middle of the history
    t = time.perf_counter()
    big, small = generate(root, args.versions, args.trials_per_version, pair)
    gen_s = round(time.perf_counter() - t, 2)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    out = {}
    for name, lake in (("all", big), ("pair", small)):
        argv = [sys.executable, "-m", "otel_assay", "gate", str(lake), "--baseline", f"version=v{pair[0]:03d}",
                "--candidate", f"version=v{pair[1]:03d}", "--json", str(root / f"{name}-report.json"), "-q"]
        walls, cpus, p = _time(argv, args.runs, env)
        if p.returncode not in (0, 1, 2):
            sys.exit(f"gate on {lake} failed (exit {p.returncode}): {p.stderr[-500:]}")
        out[name] = {"wall_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(cpus), 3),
                     "exit_code": p.returncode}
    same = _same(json.loads((root / "all-report.json").read_text())["scenarios"],
                 json.loads((root / "pair-report.json").read_text())["scenarios"])
    print(json.dumps({
        "bench": "select", "versions": args.versions, "trials": args.versions * args.trials_per_version,
        "spans": args.versions * args.trials_per_version * SPANS_PER_TRIAL, "generate_s": gen_s, "runs": args.runs,
        "gate_all_versions": out["all"], "gate_two_versions": out["pair"],
        "wall_ratio": round(out["all"]["wall_s"] / out["pair"]["wall_s"], 2),
        "cpu_ratio": round(out["all"]["cpu_s"] / out["pair"]["cpu_s"], 2),
        "same_scenario_results": same, "target_ratio": 1.5, "cpus": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
