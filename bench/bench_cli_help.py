"""Benchmark: `otel-assay --help` wall time, the start-up every command pays.

Prints one JSON line: the median and the spread of --runs runs of the real console entry
(`python -m otel_assay --help` in a fresh process), and of `python -c pass` on the same
interpreter, so the figure can be read against the interpreter's own start-up. Target:
at most 0.3 s, which needs the CLI to import none of the heavy libraries (DuckDB,
pyarrow, numpy, scipy, rich, the agent frameworks) before a command runs.

    python bench/bench_cli_help.py --runs 15
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def _times(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args()
    if args.runs < 1:
        p.error("--runs must be at least 1")
    _times([sys.executable, "-m", "otel_assay", "--help"], 1)  # warm the file cache
    help_s = _times([sys.executable, "-m", "otel_assay", "--help"], args.runs)
    bare_s = _times([sys.executable, "-c", "pass"], args.runs)
    heavy = subprocess.run(
        [sys.executable, "-c",
         "import sys, otel_assay.cli as c\n"
         "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
         "print(','.join(sorted(m for m in ('duckdb', 'pyarrow', 'numpy', 'scipy', 'rich', 'langchain_core')"
         " if m in sys.modules)), file=sys.stderr)"],
        capture_output=True, text=True, check=True).stderr.strip().splitlines()[-1:]
    print(json.dumps({
        "bench": "cli_help",
        "runs": args.runs,
        "help_wall_s_median": round(statistics.median(help_s), 4),
        "help_wall_s_min": round(min(help_s), 4),
        "help_wall_s_max": round(max(help_s), 4),
        "python_startup_s_median": round(statistics.median(bare_s), 4),
        "heavy_modules_imported": heavy[0].split(",") if heavy and heavy[0] else [],
        "target_s": 0.3,
    }))


if __name__ == "__main__":
    main()
