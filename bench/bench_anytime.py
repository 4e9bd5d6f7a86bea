"""Benchmark: the anytime-valid regression test's error rates and trials to a decision.

Prints one JSON line. For baseline pass rates p in {0.5, 0.8, 0.95}, unpaired and paired
(correlation 0.6 within a pair), delta 0.1, alpha 0.05, each simulated --reps times:

- ``fail_no_change``: P(FAIL | no drop) and ``pass_drop_delta``: P(PASS | drop of delta),
  the test read after every pair up to 600 pairs (the worst case of any look schedule:
  1, 3 or 10 looks can only err less often);
- ``fisher_10_looks``: for contrast, P(FAIL | no drop) of the one-look Fisher test read at
  10 looks between 20 and 200 trials per version (unpaired only);
- ``n_fixed``: the trials per version a one-look design with the same alpha needs for 80 %
  power both to PASS an unchanged agent (the Newcombe non-inferiority bound) and to FAIL a
  drop of delta (the normal approximation) — the larger of the two, exact for the PASS side;
- ``unchanged_mean_n`` / ``drop_2delta_mean_n``: mean pairs to a decision, uncapped
  (P(decided) ~ 0.95+), and as a fraction of ``n_fixed``; ``capped``: the same with the run
  stopped at ``n_fixed`` (then P(PASS) is lower than the one-look design's 0.8).

    python bench/bench_anytime.py --reps 2000
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
from scipy.stats import binom, fisher_exact, norm

from otel_assay.stats import plan_anytime_regression
from otel_assay.stats.regression import _newcombe_bounds

DELTA, ALPHA = 0.1, 0.05


def n_fixed(p: float, rho: float) -> int:
    """Trials per version for 80 % power of a one-look design on both sides."""
    z = norm.ppf(1 - ALPHA) + norm.ppf(0.8)
    q = p - DELTA
    fail_side = math.ceil(z * z * (p * (1 - p) + q * (1 - q) - 2 * rho * math.sqrt(p * (1 - p) * q * (1 - q)))
                          / DELTA ** 2)
    if rho:
        pass_side = math.ceil(z * z * 2 * p * (1 - p) * (1 - rho) / DELTA ** 2)
    else:
        pass_side = 10
        while True:
            k = np.arange(pass_side + 1)
            pmf = binom.pmf(k, pass_side, p)
            kb, kc = np.meshgrid(k, k, indexing="ij")
            _, hi = _newcombe_bounds(kb, pass_side, kc, pass_side, ALPHA, "less", True)
            if float((np.outer(pmf, pmf) * (hi < DELTA)).sum()) >= 0.8:
                break
            pass_side += max(1, pass_side // 50)
    return max(fail_side, pass_side)


def fisher_looks(p: float, reps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    looks = range(20, 201, 20)
    hits = 0
    for _ in range(reps):
        b, c = rng.random(200) < p, rng.random(200) < p
        hits += any(fisher_exact([[int(b[:n].sum()), n - int(b[:n].sum())], [int(c[:n].sum()), n - int(c[:n].sum())]],
                                 alternative="greater").pvalue < ALPHA for n in looks)
    return hits / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2000)
    reps = ap.parse_args().reps
    rows = []
    for rho in (0.0, 0.6):
        for p in (0.5, 0.8, 0.95):
            nf = n_fixed(p, rho)
            kw = dict(correlation=rho, reps=reps)
            same = plan_anytime_regression(p, 0.0, DELTA, ALPHA, n_max=600, seed=1, **kw)
            dropped = plan_anytime_regression(p, DELTA, DELTA, ALPHA, n_max=600, seed=2, **kw)
            long_same = plan_anytime_regression(p, 0.0, DELTA, ALPHA, n_max=20 * nf, seed=3, **kw)
            long_2d = plan_anytime_regression(p, 2 * DELTA, DELTA, ALPHA, n_max=20 * nf, seed=4, **kw)
            cap_same = plan_anytime_regression(p, 0.0, DELTA, ALPHA, n_max=nf, seed=5, **kw)
            cap_2d = plan_anytime_regression(p, 2 * DELTA, DELTA, ALPHA, n_max=nf, seed=6, **kw)
            rows.append({
                "p": p, "correlation": rho, "fail_no_change": same.p_fail, "pass_drop_delta": dropped.p_pass,
                "fisher_10_looks": None if rho else fisher_looks(p, min(reps, 1000), 7), "n_fixed": nf,
                "unchanged_mean_n": round(long_same.expected_n, 1), "unchanged_p_pass": long_same.p_pass,
                "unchanged_fraction": round(long_same.expected_n / nf, 2),
                "drop_2delta_mean_n": round(long_2d.expected_n, 1), "drop_2delta_p_fail": long_2d.p_fail,
                "drop_2delta_fraction": round(long_2d.expected_n / nf, 2),
                "capped": {"unchanged_mean_n": round(cap_same.expected_n, 1), "unchanged_p_pass": cap_same.p_pass,
                           "unchanged_fraction": round(cap_same.expected_n / nf, 2),
                           "drop_2delta_p_fail": cap_2d.p_fail,
                           "drop_2delta_fraction": round(cap_2d.expected_n / nf, 2)}})
    print(json.dumps({"bench": "anytime", "delta": DELTA, "alpha": ALPHA, "reps": reps, "rows": rows}))


if __name__ == "__main__":
    main()
