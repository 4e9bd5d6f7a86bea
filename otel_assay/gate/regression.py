"""The regression check: did the candidate's pass rate drop from the baseline's, per scenario.

FAIL on a significant drop of at least δ, PASS on non-inferiority (the drop's upper bound
below δ). Trials that pair by index in both arms use the exact McNemar test, which sees a
drop the unpaired Fisher test needs many more trials for.
"""

from __future__ import annotations

import numpy as np

from .. import stats
from .arms import outcomes
from .config import GateConfig
from .family import Family
from .result import FAIL, INCONCLUSIVE, PASS, SKIPPED, Check, ScenarioResult

def _paired(ib, ob, ic, oc) -> tuple[int, int] | None:
    """(regressions, improvements) when both arms hold the same distinct trial indices."""
    if len(ib) == 0 or len(ib) != len(ic):
        return None
    if any(x is None or x != x for x in ib) or any(x is None or x != x for x in ic):
        return None
    ib, ic = ib.astype(np.int64), ic.astype(np.int64)
    if len(np.unique(ib)) != len(ib) or not np.array_equal(np.sort(ib), np.sort(ic)):
        return None
    b = ob[np.argsort(ib)]
    c = oc[np.argsort(ic)]
    return int(np.sum(b & ~c)), int(np.sum(~b & c))


def regression_checks(results: list[ScenarioResult], arms_b, arms_c, cfg: GateConfig, family: Family) -> None:
    for r in results:
        if not r.settings.checks["regression"]:
            continue
        if r.baseline is None or r.baseline.trials == 0:
            r.checks.append(Check("regression", INCONCLUSIVE, "no baseline trials for this scenario: "
                                  "nothing to compare with (run the baseline on it)"))
            continue
        if r.candidate.trials == 0:
            r.checks.append(Check("regression", INCONCLUSIVE, "the candidate did not run this scenario"))
            continue
        if r.baseline.with_outcome == 0 or r.candidate.with_outcome == 0:
            side = "baseline" if r.baseline.with_outcome == 0 else "candidate"
            r.checks.append(Check("regression", SKIPPED, f"no {side} trial has an outcome; judged by the "
                                  "checks that need none (fingerprint, stability, coverage)", gating=False))
            continue
        b, c, s = r.baseline, r.candidate, r.settings
        res = stats.regression_verdict(b.passes, b.with_outcome, c.passes, c.with_outcome, s.delta, cfg.alpha, s.beta)
        pairs = None
        if cfg.pairing == "auto":
            pairs = _paired(*outcomes(arms_b[r.scenario]), *outcomes(arms_c[r.scenario]))
        mc = stats.mcnemar_exact(*pairs) if pairs else None
        test = "McNemar" if mc else "Fisher"
        e = res.effects
        st = {"test": test.lower() if mc is None else "mcnemar-exact", "baseline_successes": res.baseline_successes,
              "baseline_n": res.baseline_n, "candidate_successes": res.candidate_successes,
              "candidate_n": res.candidate_n, "drop": res.drop, "drop_upper": res.drop_upper,
              "pvalue": mc.pvalue if mc else res.pvalue, "pvalue_adjusted": None,
              "neg_log10_pvalue": mc.neg_log10_pvalue if mc else res.neg_log10_pvalue,
              "fisher_pvalue": res.pvalue, "cohens_h": e.cohens_h, "cohens_h_magnitude": e.cohens_h_magnitude,
              "odds_ratio": e.odds_ratio, "power": res.power, "n_star": res.n_star, "delta": s.delta}
        if mc:
            st.update(regressions=mc.regressions, improvements=mc.improvements)
        check = Check("regression", INCONCLUSIVE, "", stats=st)
        r.checks.append(check)

        # every regression test is in the family, also one whose drop is below delta: which
        # tests enter must not depend on the data, or the correction would not hold
        def finish(adjusted, check=check, res=res, s=s, test=test):
            p_adj = adjusted[0]
            check.stats["pvalue_adjusted"] = p_adj
            tag = family.adjusted_tag()
            if p_adj < cfg.alpha and res.drop >= s.delta - 1e-12:
                check.verdict, check.reason = FAIL, (f"{tag}{test} p={p_adj:.3g} < alpha={cfg.alpha} and drop "
                                                     f"{res.drop:.3f} >= delta={s.delta}")
            elif res.drop_upper < s.delta:
                check.verdict, check.reason = PASS, (f"upper {1 - cfg.alpha:.0%} bound on the drop "
                                                     f"{res.drop_upper:.3f} < delta={s.delta}")
            else:
                # n* is the size that detects a drop of delta; past it an undecided drop lies
                # between 0 and delta, and saying "n* trials decide" asked for trials already run
                n_min = min(res.baseline_n, res.candidate_n)
                hint = ("" if not res.n_star else
                        f": about {res.n_star} trials per version decide (n*)" if n_min < res.n_star else
                        f": {n_min} trials per version already reach n*={res.n_star}; a drop of {res.drop:.3f}, "
                        "between 0 and delta, takes many more to tell from either")
                check.reason = (f"{tag}{test} p={p_adj:.3g}; upper bound on the drop {res.drop_upper:.3f} >= "
                                f"delta={s.delta}" + hint)

        family.add(check, [st["pvalue"]], finish)
