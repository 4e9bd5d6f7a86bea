"""Benchmark: opening a lake of many small files, and the trials over it.

Prints one JSON line. A lake fed by many short agent processes (each test process flushes
its own file) or by a collector that flushes often holds many small files until
`otel-assay compact` merges them. Every command opens the lake (Engine: the files' schemas
are checked, the views bound) before it computes anything, so the time to open grows
with the file count. Generates (once, cached in --dir) --files files of --trials-per-file
trials each, with bench_gate's generator, then times opening the engine and computing
`trials` (which builds `steps`) in this process, and the real CLI (`python -m otel_assay
trials LAKE --format csv`) --runs times in a fresh process each, after one warm-up run
(which also writes the lake's file inventory, as the first command on a lake does).
Target: a median of at most 1.5 s for `trials` on a lake of 1,000 small files.

    python bench/bench_open.py --trials-per-file 1   # 1,000 files of 1 trial (20,000 spans)
    python bench/bench_open.py                       # 1,000 files of 10 trials (200,000 spans)
    python bench/bench_open.py --files 300
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_gate import SPANS_PER_TRIAL, _cpu_children, generate

from otel_assay.analyze.engine import Engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--trials-per-file", type=int, default=10)
    ap.add_argument("--runs", type=int, default=10, help="CLI runs to time (0: none)")
    ap.add_argument("--dir", type=Path, default=None,
                    help="lake directory (default /tmp/otel-assay-bench-open-<files>x<trials-per-file>)")
    args = ap.parse_args()
    lake = args.dir or Path(f"/tmp/otel-assay-bench-open-{args.files}x{args.trials_per_file}")
    gen_s = None
    if not (lake / "spans").is_dir():
        t = time.perf_counter()
        generate(lake, args.files * args.trials_per_file, chunk_trials=args.trials_per_file)
        gen_s = round(time.perf_counter() - t, 2)
    n_files = sum(1 for _ in (lake / "spans").rglob("*.parquet"))
    t0 = time.perf_counter()
    eng = Engine(lake, memory_limit="1.5GB")
    t1 = time.perf_counter()
    eng.materialize()  # as the analysis commands do
    n_trials = eng.rows("SELECT count(*) FROM trials")[0][0]
    t2 = time.perf_counter()
    eng.close()
    walls, cpus = [], []
    argv = [sys.executable, "-m", "otel_assay", "trials", str(lake), "--format", "csv"]
    for i in range(args.runs + 1 if args.runs else 0):
        cpu = _cpu_children()
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        if i:  # the first run warms the file cache
            walls.append(time.perf_counter() - t)
            cpus.append(_cpu_children() - cpu)
    print(json.dumps({
        "bench": "open", "files": n_files, "spans": args.files * args.trials_per_file * SPANS_PER_TRIAL,
        "trials": n_trials, "generate_s": gen_s, "open_s": round(t1 - t0, 3), "trials_s": round(t2 - t1, 3),
        "total_s": round(t2 - t0, 3), "runs": args.runs,
        "cli_trials_wall_s": round(statistics.median(walls), 3) if walls else None,
        "cli_trials_cpu_s": round(statistics.median(cpus), 3) if cpus else None,
        "target_s": 1.5, "cpus": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
