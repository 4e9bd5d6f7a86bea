"""Benchmark: trials used by SPRT vs fixed-n at equal (alpha, beta), and the framework's
overhead per trial, through the real runner (`otel_assay.live.run_suite`: trial API, span
lake, step collector).

Prints one JSON line. Agents are the scripted offline routers of tests/live/agents.py: clearly
good (p = 0.97), borderline (p = threshold - delta/2) and clearly bad (p = 0.5), judged at
threshold 0.85, delta 0.15, alpha 0.05, beta 0.10 (H0: p >= 0.85 vs H1: p <= 0.70).

Fixed-n at equal (alpha, beta) is the one-sided binomial design with those error rates at
p0 = 0.85 / p1 = 0.70 (normal approximation); the paper's Eq. 1 (two-sided quantile) is
reported too.

    python bench/bench_live.py              # 60 runs per agent
    python bench/bench_live.py --runs 20
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

import numpy as np
from scipy.stats import norm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import otel_assay  # noqa: E402
from otel_assay.live.runner import run_suite  # noqa: E402
from otel_assay.live.scenarios import parse_scenarios  # noqa: E402
from otel_assay.stats import sample_size_threshold, sprt_expected_n, sprt_operating_characteristics  # noqa: E402
from tests.live.agents import Router  # noqa: E402

THETA, DELTA, ALPHA, BETA = 0.85, 0.15, 0.05, 0.10


def suite(method="sprt", trials=200):
    return parse_scenarios({"name": "bench", "config": {
        "threshold": THETA, "delta": DELTA, "alpha": ALPHA, "beta": BETA, "method": method, "n_max": 200,
        "trials": trials}, "scenarios": [{"name": "billing", "input": "My payment failed",
                                          "properties": {"expected": "billing"}, "evaluator": "exact_match"}]})


def fixed_n_equal_errors() -> int:
    p0, p1 = THETA, THETA - DELTA
    z = norm.ppf(1 - ALPHA) * math.sqrt(p0 * (1 - p0)) + norm.ppf(1 - BETA) * math.sqrt(p1 * (1 - p1))
    return int(math.ceil((z / DELTA) ** 2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--overhead-trials", type=int, default=400)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_live_")
    n_fixed = fixed_n_equal_errors()
    out = {"bench": "live", "theta": THETA, "delta": DELTA, "alpha": ALPHA, "beta": BETA, "runs": args.runs,
           "fixed_n_equal_errors": n_fixed, "fixed_n_paper_eq1": sample_size_threshold(THETA, DELTA, ALPHA, BETA),
           "agents": {}}
    for label, p in (("good", 0.97), ("borderline", THETA - DELTA / 2), ("bad", 0.5)) if args.runs else ():
        ns, dec = [], []
        for seed in range(args.runs):
            r = run_suite(suite(), Router(p, seed=1000 + seed), version=f"{label}{seed}",
                          lake=os.path.join(tmp, f"{label}{seed}"), concurrency=1, resume=False)
            ns.append(r.scenarios[0].n)
            dec.append(r.scenarios[0].decision)
        exact = sprt_operating_characteristics(THETA, DELTA, ALPHA, BETA, p=p, n_max=200)
        out["agents"][label] = {
            "p": p, "sprt_mean_trials": float(np.mean(ns)), "sprt_median_trials": float(np.median(ns)),
            "sprt_p90_trials": float(np.percentile(ns, 90)), "sprt_max_trials": int(max(ns)),
            "exact_expected_n": round(exact.expected_n, 2),
            "wald_expected_n": round(sprt_expected_n(THETA, DELTA, ALPHA, BETA, p=p), 2),
            "fixed_n": n_fixed, "saving_vs_fixed": round(1 - float(np.mean(ns)) / n_fixed, 3),
            "decisions": {d: dec.count(d) for d in sorted(set(dec))}}
    # overhead per trial: the runner vs calling the same agent in a bare loop under the trial API
    n = args.overhead_trials
    lake = os.path.join(tmp, "overhead")
    agent = Router(1.0, seed=0)
    otel_assay.capture.use_lake(lake)
    t0 = time.perf_counter()
    for i in range(n):
        with otel_assay.trial("bare", version="o", index=i) as t:
            t.outcome(passed=agent("x") == "billing")
    otel_assay.flush()
    bare = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for i in range(n):
        agent("x")  # outside a trial: steps only
    steps_only = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    r = run_suite(suite("fixed", trials=n), agent, version="o", lake=os.path.join(tmp, "overhead_runner"),
                  concurrency=1, resume=False)
    runner = (time.perf_counter() - t0) / r.scenarios[0].ran
    from otel_assay.live.runner import existing_trials
    t0 = time.perf_counter()
    existing_trials(os.path.join(tmp, "overhead_runner"), "o", ["billing"])
    resume_read = time.perf_counter() - t0
    out["overhead"] = {"trials": n, "agent_steps_only_us": round(steps_only * 1e6, 1),
                       "trial_api_loop_us": round(bare * 1e6, 1), "runner_us": round(runner * 1e6, 1),
                       "runner_overhead_vs_trial_api_us": round((runner - bare) * 1e6, 1),
                       "resume_read_of_those_trials_s": round(resume_read, 3)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
