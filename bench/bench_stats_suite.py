"""The whole stats pass for a 200-scenario suite (target <= 2 s): per scenario the pass-rate
verdict, the regression verdict (Holm-corrected across the suite), Hotelling T² with 9,999
permutations on 17-feature fingerprints and the Bayesian regression probability; then Holm on
the fingerprint p-values and the suite verdict. Prints one JSON line."""

import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from otel_assay.stats import (  # noqa: E402
    adjust_pvalues,
    bayes_regression,
    hotelling_t2,
    regression_verdicts,
    suite_verdict,
    verdict,
)
from tests.stats.fingerprint_sim import FEATURES, simulate_fingerprints  # noqa: E402

SCENARIOS = 200
TRIALS = 30  # per arm: n_b + n_c = 60 < 100, so Hotelling uses permutations by default


def main() -> None:
    rng = np.random.default_rng(0)
    rates = rng.uniform(0.7, 0.98, SCENARIOS)
    kb = rng.binomial(TRIALS, rates)
    kc = rng.binomial(TRIALS, np.clip(rates - rng.choice([0.0, 0.15], SCENARIOS, p=[0.9, 0.1]), 0, 1))
    p_tool = rng.choice([0.5, 0.35], SCENARIOS, p=[0.9, 0.1])
    fps = [(simulate_fingerprints(rng, TRIALS), simulate_fingerprints(rng, TRIALS, p)) for p in p_tool]

    start = time.perf_counter()
    pass_rate = [verdict(int(k), TRIALS, 0.8) for k in kc]
    regression = regression_verdicts(kb, np.full(SCENARIOS, TRIALS), kc, np.full(SCENARIOS, TRIALS), delta=0.1)
    fingerprint = [hotelling_t2(b, c, n_permutations=9999, seed=0, feature_names=FEATURES) for b, c in fps]
    bayes = [bayes_regression(int(b), TRIALS, int(c), TRIALS, delta=0.1) for b, c in zip(kb, kc)]
    fp_adjusted = adjust_pvalues([r.pvalue for r in fingerprint], "holm")
    fp_verdicts = ["FAIL" if rej else "PASS" for rej in fp_adjusted.rejected]
    suite = suite_verdict([r.verdict for r in regression] + fp_verdicts)
    elapsed = time.perf_counter() - start

    print(json.dumps({
        "bench": "stats_suite", "scenarios": SCENARIOS, "trials_per_arm": TRIALS, "features": len(FEATURES),
        "permutations": 9999, "seconds": round(elapsed, 3), "target_s": 2.0, "ok": elapsed <= 2.0,
        "suite_verdict": str(suite.verdict), "regression_fail": sum(r.verdict == "FAIL" for r in regression),
        "fingerprint_fail": fp_verdicts.count("FAIL"), "pass_rate_pass": sum(r.verdict == "PASS" for r in pass_rate),
        "bayes_fail": sum(r.verdict == "FAIL" for r in bayes),
    }))


if __name__ == "__main__":
    main()
