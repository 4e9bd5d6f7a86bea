"""The fingerprint check under re-gating: today's Hotelling T² against the anytime test.

Prints one JSON line (fixed seeds; about 4 minutes on one core):

- ``hotelling_aa_looks``: P(FAIL | no change) of the gate's one-look Hotelling check (the
  function and arguments the gate calls for one scenario, with its rule that a shift only
  for the better does not block), read at 1 look (200 trials per arm), 3 looks (20, 63,
  200) and 10 looks (20 to 200, evenly spaced in log) and FAILing at any of them.
- ``anytime_aa``: P(FAIL | no change) of the anytime test read after every pair up to 400.
- ``power``: P(FAIL) under shifts at 50 and 100 trials per arm: Hotelling at one look, the
  anytime test read after every pair up to that count (so at any number of looks), and
  the anytime test's median pairs to FAIL (reading after every pair, up to 400; null when
  fewer than half of the runs FAIL by 400).
- ``combined_aa`` and ``combined_*``: FAIL when the anytime test reaches 2/alpha or
  Hotelling at alpha/2 on the first 50 pairs FAILs (a planned look: the same trials give
  the same p-value however often the gate runs), read after every pair up to 400 (A/A) or
  up to 50 / 100 (power); over the first ``hotelling_reps`` runs.

Usage: python bench/bench_fingerprint_anytime.py [hotelling_reps] [anytime_reps]
"""

import json
import math
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from otel_assay.gate.fingerprint import _moves, _only_improvements  # noqa: E402
from otel_assay.stats import Verdict, hotelling_t2  # noqa: E402
from otel_assay.stats.fingerprint_anytime import shift_log_wealth  # noqa: E402
from tests.stats.fingerprint_sim import FEATURES as TOOL_MIX_FEATURES  # noqa: E402
from tests.stats.fingerprint_sim import simulate_fingerprints  # noqa: E402
from tests.stats.gate_fingerprint_sim import DIRECTIONS, FEATURES, count_fingerprints, gate_fingerprints  # noqa: E402

ALPHA = 0.05
LOOKS = {"1": [200], "3": [20, 63, 200], "10": [int(round(x)) for x in np.geomspace(20, 200, 10)]}
N_MAX = 400
PLANNED_LOOK = 50

# name -> (trial generator, its feature names, their directions)
NULLS = {
    "gate_lognormal": (lambda rng, n: gate_fingerprints(rng, n), FEATURES, DIRECTIONS),
    "gate_pareto_tokens": (lambda rng, n: gate_fingerprints(rng, n, tails="pareto"), FEATURES, DIRECTIONS),
    "counts_and_ties": (count_fingerprints, tuple(f"count_{j}" for j in range(5)), None),
    "tool_mix": (simulate_fingerprints, TOOL_MIX_FEATURES, None),
}
# name -> (baseline generator, candidate generator, feature names, directions)
SHIFTS = {
    "tool_call_+1_on_30pct": (gate_fingerprints, lambda rng, n: gate_fingerprints(rng, n, extra_tool=0.3)),
    "tool_call_+1_on_60pct": (gate_fingerprints, lambda rng, n: gate_fingerprints(rng, n, extra_tool=0.6)),
    "tokens_+20pct": (gate_fingerprints, lambda rng, n: gate_fingerprints(rng, n, token_factor=1.2)),
    "tokens_+50pct": (gate_fingerprints, lambda rng, n: gate_fingerprints(rng, n, token_factor=1.5)),
    "errors_.05_to_.15": (gate_fingerprints, lambda rng, n: gate_fingerprints(rng, n, error_rate=0.15)),
    "errors_.05_to_.25": (gate_fingerprints, lambda rng, n: gate_fingerprints(rng, n, error_rate=0.25)),
    "only_better_tokens_-30pct_errors_.05_to_.02": (
        gate_fingerprints, lambda rng, n: gate_fingerprints(rng, n, token_factor=0.7, error_rate=0.02)),
    # the shift of the Hotelling power test (tests/stats/test_hotelling.py)
    "tool_A_.5_to_.35": (simulate_fingerprints, lambda rng, n: simulate_fingerprints(rng, n, 0.35)),
}


def hotelling_fails(xb, xc, names, alpha: float = ALPHA) -> bool:
    """The gate's fingerprint FAIL for one scenario (999 permutations where the gate draws
    9,999: the same test, with a coarser Monte Carlo p-value)."""
    h = hotelling_t2(xb, xc, alpha=alpha, beta=0.1, n_permutations=999, seed=0, feature_names=names, top_k=5)
    if h.verdict is Verdict.INCONCLUSIVE or not h.pvalue < alpha:
        return False
    return not _only_improvements(_moves(xb, xc, list(names), alpha))


def hotelling_aa(rng, make, names, reps: int) -> dict:
    counts = sorted({n for ns in LOOKS.values() for n in ns})
    hits = dict.fromkeys(LOOKS, 0)
    for _ in range(reps):
        xb, xc = make(rng, counts[-1]), make(rng, counts[-1])
        fails = {n: hotelling_fails(xb[:n], xc[:n], names) for n in counts}
        for k, ns in LOOKS.items():
            hits[k] += any(fails[n] for n in ns)
    return {k: round(v / reps, 4) for k, v in hits.items()}


def runs(rng, make_b, make_c, reps: int):
    return np.stack([make_b(rng, N_MAX) for _ in range(reps)]), np.stack([make_c(rng, N_MAX) for _ in range(reps)])


def first_fail(xb, xc, directions, alpha: float = ALPHA) -> np.ndarray:
    """The pair count at which the anytime test first FAILs in each run (N_MAX + 1: never)."""
    hit = shift_log_wealth(xb, xc, directions=directions) >= math.log(1.0 / alpha)
    return np.where(hit.any(axis=-1), hit.argmax(axis=-1) + 1, N_MAX + 1)


def combined_first_fail(xb, xc, names, directions, reps: int) -> np.ndarray:
    """The pair count of the first FAIL of the combination: the anytime test at alpha/2, or
    Hotelling at alpha/2 on the first PLANNED_LOOK pairs (one fixed look however often the
    gate runs), in the first ``reps`` runs."""
    xb, xc = xb[:reps], xc[:reps]
    at = first_fail(xb, xc, directions, ALPHA / 2)
    hot = np.array([hotelling_fails(b[:PLANNED_LOOK], c[:PLANNED_LOOK], names, ALPHA / 2) for b, c in zip(xb, xc)])
    return np.where(hot, np.minimum(at, PLANNED_LOOK), at)


def main() -> None:
    h_reps = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    a_reps = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    start = time.perf_counter()
    rng = np.random.default_rng(2026)
    out = {"bench": "fingerprint_anytime", "alpha": ALPHA, "looks": LOOKS, "hotelling_reps": h_reps,
           "anytime_reps": a_reps, "hotelling_aa_looks": {}, "anytime_aa": {}, "combined_aa": {}, "power": {}}
    for name, (make, names, dirs) in NULLS.items():
        out["hotelling_aa_looks"][name] = hotelling_aa(rng, make, names, h_reps)
        xb, xc = runs(rng, make, make, a_reps)
        out["anytime_aa"][name] = round(float(np.mean(first_fail(xb, xc, dirs) <= N_MAX)), 4)
        out["combined_aa"][name] = round(float(np.mean(combined_first_fail(xb, xc, names, dirs, h_reps) <= N_MAX)), 4)
    for name, (make_b, make_c) in SHIFTS.items():
        names, dirs = (TOOL_MIX_FEATURES, None) if make_b is simulate_fingerprints else (FEATURES, DIRECTIONS)
        row = {}
        for n in (50, 100):
            row[f"hotelling_{n}"] = round(sum(hotelling_fails(make_b(rng, n), make_c(rng, n), names)
                                              for _ in range(h_reps)) / h_reps, 4)
        xb, xc = runs(rng, make_b, make_c, a_reps)
        at, both = first_fail(xb, xc, dirs), combined_first_fail(xb, xc, names, dirs, h_reps)
        for n in (50, 100, N_MAX):
            row[f"anytime_{n}"] = round(float(np.mean(at <= n)), 4)
        row["anytime_median_pairs"] = int(np.median(at)) if np.mean(at <= N_MAX) >= 0.5 else None
        for n in (50, 100):
            row[f"combined_{n}"] = round(float(np.mean(both <= n)), 4)
        out["power"][name] = row
    out["seconds"] = round(time.perf_counter() - start, 1)
    out["ok"] = all(v <= ALPHA for v in [*out["anytime_aa"].values(), *out["combined_aa"].values()])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
