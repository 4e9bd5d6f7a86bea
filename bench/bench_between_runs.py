"""Benchmark: the regression test against a baseline of several runs whose pass rates vary.

Prints one JSON line. Pass rate p = 0.8, delta 0.1, alpha 0.05, 200 trials per arm: the
baseline's k runs (k in {1, 2, 3, 5, 10}) share its 200 trials (``--run-trials``: each run
has that many instead), the candidate is one run of 200; each run's pass rate is shifted by
N(0, tau^2), tau in {0, 0.05, 0.1}. Each cell is simulated --reps times through the gate's own
regression test (``gate.regression.regression_test``, what the check runs on a lake), widened
when the baseline has 3 or more runs, and, for contrast, with the baseline taken as one run
(what the test did before):

- ``fail_no_change``: P(FAIL | unchanged agent), ``plain`` the unwidened test's;
- ``pass_no_change``: P(PASS | unchanged agent) (non-inferiority needs many trials at 200);
- ``fail_drop_2delta``: P(FAIL | true drop of 2 delta), the power the widening costs;
- ``pass_drop_delta``: P(PASS | true drop of delta), held to alpha by non-inferiority.

    python bench/bench_between_runs.py --reps 2000
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from otel_assay.gate.regression import regression_test

P, DELTA, ALPHA, N = 0.8, 0.1, 0.05, 200


def _arm(outcomes, runs, index):
    n = len(outcomes)
    return {"trial_index": np.asarray(index), "counted": np.ones(n, dtype=bool),
            "passed": np.array([bool(o) for o in outcomes], dtype=object), "run_id": np.array(runs, dtype=object)}


def rates(k: int, tau: float, drop: float, reps: int, seed: int, per: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    runs = np.repeat([f"b{j}" for j in range(k)], per)
    index = np.tile(np.arange(per), k)
    out = {"FAIL": 0, "PASS": 0, "plain_FAIL": 0, "plain_PASS": 0}
    for _ in range(reps):
        p_runs = np.clip(P + tau * rng.standard_normal(k), 0, 1)
        p_cand = np.clip(P - drop + tau * rng.standard_normal(), 0, 1)
        b = _arm(np.concatenate([rng.random(per) < q for q in p_runs]), runs, index)
        c = _arm(rng.random(N) < p_cand, ["c"] * N, np.arange(N))
        v = regression_test(b, c, DELTA, ALPHA, 0.1, "auto", bounds=False)[0].verdict
        out[v] = out.get(v, 0) + 1
        alone = dict(b, run_id=np.full(len(runs), "b", dtype=object))
        v = regression_test(alone, c, DELTA, ALPHA, 0.1, "auto", bounds=False)[0].verdict
        out["plain_" + v] = out.get("plain_" + v, 0) + 1
    return {key: out[key] / reps for key in ("FAIL", "PASS", "plain_FAIL", "plain_PASS")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--run-trials", type=int, default=0, help="trials per baseline run (default: 200 / k)")
    args = ap.parse_args()
    rows = []
    for tau in (0.0, 0.05, 0.1):
        for k in (1, 2, 3, 5, 10):
            per = args.run_trials or N // k
            same = rates(k, tau, 0.0, args.reps, 1, per)
            d2 = rates(k, tau, 2 * DELTA, args.reps, 2, per)
            d1 = rates(k, tau, DELTA, args.reps, 3, per)
            rows.append({"tau": tau, "k": k, "trials_per_run": per,
                         "fail_no_change": same["FAIL"], "fail_no_change_plain": same["plain_FAIL"],
                         "pass_no_change": same["PASS"], "pass_no_change_plain": same["plain_PASS"],
                         "fail_drop_2delta": d2["FAIL"], "fail_drop_2delta_plain": d2["plain_FAIL"],
                         "pass_drop_delta": d1["PASS"], "pass_drop_delta_plain": d1["plain_PASS"]})
    print(json.dumps({"bench": "between_runs", "p": P, "delta": DELTA, "alpha": ALPHA, "trials_per_arm": N,
                      "reps": args.reps, "rows": rows}))


if __name__ == "__main__":
    main()
