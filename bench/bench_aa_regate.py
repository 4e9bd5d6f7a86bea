"""Benchmark: the whole gate's A/A false-block rate when users re-gate, end to end through the CLI.

Prints one JSON line. Users gate, see "manual", add trials and gate again; every look is a
chance to block an agent that did not change. Here --pairs pairs of versions (a{k}, b{k})
come from one synthetic agent (``otel_assay.collect.synthetic``: outcomes at --pass-rate,
random tool mix and token counts, so the fingerprint and regression checks both run).
Trials arrive in looks of --step trials per version: each look is an OTLP JSON Lines file
imported with the real ``otel-assay import``, and after it each pair is gated with the real
``otel-assay gate LAKE --baseline version=a{k} --candidate version=b{k}`` (exit 1 = block).
Reported: P(block at any look) for 1 look (the last), 3 looks (spread over the run) and
every look (--looks), with a 95 % Wilson interval, against alpha. Each pair uses its own
seeds and its own trial indices, so the pairs are independent gates.

    python bench/bench_aa_regate.py --pairs 100 --looks 10 --step 20   # ~15 min on 2 cores
    python bench/bench_aa_regate.py --pairs 10 --looks 3                # a quick look
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from otel_assay.collect import synthetic

T0 = 1_790_000_000_000_000_000


def _wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def _write_look(path: Path, pairs: int, look: int, step: int, pass_rate: float, scenarios: int) -> None:
    """One file: ``step`` new trials of every version, indices continuing the earlier looks."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_import import _json_line  # the Collector's JSON Lines shape

    with open(path, "wb") as f:
        for k in range(pairs):
            for side in "ab":
                rng = random.Random(f"{k}-{side}-{look}")
                req = synthetic.request(step, rng=rng, start_ns=T0 + look * 10**12 + k * 10**9,
                                        version=f"{side}{k}", first_index=look * step, scenarios=scenarios,
                                        pass_rate=pass_rate)
                f.write(_json_line(req))


def _gate(cli: list[str], lake: Path, k: int) -> int:
    r = subprocess.run([*cli, "gate", str(lake), "--baseline", f"version=a{k}", "--candidate", f"version=b{k}"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode not in (0, 1, 2):
        raise RuntimeError(f"gate failed ({r.returncode}): {r.stdout[-500:]} {r.stderr[-1000:]}")
    return r.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--looks", type=int, default=10)
    ap.add_argument("--step", type=int, default=20, help="trials per version added at each look")
    ap.add_argument("--scenarios", type=int, default=2)
    ap.add_argument("--pass-rate", type=float, default=0.8)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="gates run at once")
    args = ap.parse_args()
    cli = [sys.executable, "-m", "otel_assay"]
    three = sorted({args.looks - 1, (2 * args.looks) // 3 - 1, args.looks // 3 - 1} - {-1})
    blocked_at: dict[int, set[int]] = {}  # look -> pairs blocked there
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-aa-") as tmp:
        lake = Path(tmp) / "lake"
        for look in range(args.looks):
            f = Path(tmp) / f"look{look}.jsonl"
            _write_look(f, args.pairs, look, args.step, args.pass_rate, args.scenarios)
            r = subprocess.run([*cli, "import", str(f), "--dir", str(lake), "-q"], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"import failed: {r.stdout} {r.stderr}")
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                codes = list(pool.map(lambda k: _gate(cli, lake, k), range(args.pairs)))
            blocked_at[look] = {k for k, c in enumerate(codes) if c == 1}
    result = {"bench": "aa_regate", "pairs": args.pairs, "looks": args.looks, "step": args.step,
              "scenarios": args.scenarios, "pass_rate": args.pass_rate,
              "trials_per_version_at_last_look": args.looks * args.step, "alpha": 0.05}
    for name, looks in (("one_look", [args.looks - 1]), ("three_looks", three),
                        ("every_look", list(range(args.looks)))):
        k = len(set().union(*(blocked_at[look] for look in looks)))
        result[name] = {"looks_at_trials": [(look + 1) * args.step for look in looks],
                        "p_block": round(k / args.pairs, 4), "ci95": _wilson(k, args.pairs)}
    result["seconds"] = round(time.monotonic() - started)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
