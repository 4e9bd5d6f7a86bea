"""Benchmark: opening a lake of many small files, and the trials over it.

Prints one JSON line. A lake fed by many short agent processes (each test process flushes
its own file) or by a collector that flushes often holds many small files until
`otel-assay compact` merges them. Every command opens the lake (Engine: the files' schemas
are checked, the views bound) before it computes anything, so the time to open grows
with the file count. Generates (once, cached in --dir) --files files of --trials-per-file
trials each, with bench_gate's generator, then times opening the engine and computing
`trials` (which builds `steps`).

    python bench/bench_open.py                    # 1,000 files of 10 trials (200,000 spans)
    python bench/bench_open.py --files 300
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench_gate import SPANS_PER_TRIAL, generate

from otel_assay.analyze.engine import Engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--trials-per-file", type=int, default=10)
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
    n_trials = eng.rows("SELECT count(*) FROM trials")[0][0]
    t2 = time.perf_counter()
    eng.close()
    print(json.dumps({
        "bench": "open", "files": n_files, "spans": args.files * args.trials_per_file * SPANS_PER_TRIAL,
        "trials": n_trials, "generate_s": gen_s, "open_s": round(t1 - t0, 3), "trials_s": round(t2 - t1, 3),
        "total_s": round(t2 - t0, 3),
    }))


if __name__ == "__main__":
    main()
