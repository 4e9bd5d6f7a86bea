"""The regression check: did the candidate's pass rate drop from the baseline's, per scenario.

FAIL on a significant drop, PASS on non-inferiority (the drop is below δ), both decided by
the anytime-valid tests of ``stats.anytime``: users gate, add trials and gate again, and a
test read at every look must not err more often for it. The tests see the trials as pairs:
by trial index when both versions ran the same indices (the same inputs, so what an input
does to both cancels out), else in run order, the longer arm's extra trials unused.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .. import stats
from .arms import outcomes
from .config import GateConfig
from .family import Family
from .result import FAIL, INCONCLUSIVE, PASS, SKIPPED, Check, ScenarioResult

# simulated runs behind each "trials to decide" estimate: enough for a tenth either way
PLAN_REPS = 200


def _by_index(ib, ob, ic, oc) -> tuple[np.ndarray, np.ndarray] | None:
    """The outcomes of the trial indices both arms ran, in index order; None when an arm has
    a trial without an index or two with one index (two runs of a version), or the arms
    share no index. Which trials pair depends on their indices alone, never on outcomes,
    so the choice cannot bend the error rates."""
    if len(ib) == 0 or len(ic) == 0:
        return None
    if any(x is None or x != x for x in ib) or any(x is None or x != x for x in ic):
        return None
    ib, ic = ib.astype(np.int64), ic.astype(np.int64)
    if len(np.unique(ib)) != len(ib) or len(np.unique(ic)) != len(ic):
        return None
    common, at_b, at_c = np.intersect1d(ib, ic, assume_unique=True, return_indices=True)
    if common.size == 0:
        return None
    return ob[at_b], oc[at_c]


def pairs(arm_b, arm_c, pairing: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(baseline outcomes, candidate outcomes, how they pair): the i-th of each is a pair.
    By trial index where both arms ran the same indices (with ``pairing: auto``), else the
    two arms in run order, the longer one's extra trials unused."""
    ib, ob = outcomes(arm_b)
    ic, oc = outcomes(arm_c)
    if pairing == "auto":
        by_index = _by_index(ib, ob, ic, oc)
        if by_index is not None:
            return *by_index, "trial index"
    n = min(len(ob), len(oc))
    return ob[:n], oc[:n], "run order"


@lru_cache(maxsize=256)
def trials_to_decide(baseline_rate: float, drop: float, delta: float, alpha: float, correlation: float) -> str:
    """The mean pairs for the tests to decide, simulated at these rates (the rule applied, not
    a normal approximation of another test), in words. Rates are rounded by the caller, so
    that scenarios with like rates share one simulation, which is capped at four times the
    pairs a one-look test with 80 % power would need."""
    p_c = baseline_rate - drop
    var = (baseline_rate * (1 - baseline_rate) + p_c * (1 - p_c)
           - 2 * correlation * math.sqrt(baseline_rate * (1 - baseline_rate) * p_c * (1 - p_c)))
    one_look = 6.2 * max(var, 0.01) / (delta * delta)
    n_max = int(min(20_000, max(200, 4 * one_look)))
    plan = stats.plan_anytime_regression(baseline_rate, drop, delta, alpha, n_max=n_max, correlation=correlation,
                                         reps=PLAN_REPS, seed=0)
    if plan.p_open > 0.1:
        return f"more than {n_max}"
    return f"about {plan.expected_n:.0f}"


def _plan_hint(b: np.ndarray, c: np.ndarray, delta: float, alpha: float) -> str:
    """How many pairs the tests need on average to decide, for an unchanged agent and for one
    that dropped by delta, at the baseline's observed pass rate (and the pairs' correlation)."""
    p = float(np.clip(round(float(b.mean()), 2) if len(b) else 0.8, 0.02, 0.98))
    rho = 0.0
    if len(b) >= 10 and b.std() > 0 and c.std() > 0:
        rho = float(np.clip(round(float(np.corrcoef(b, c)[0, 1]), 1), 0.0, 0.9))
    parts = [f"{trials_to_decide(p, 0.0, delta, alpha, rho)} pairs decide for an unchanged agent on average"]
    if p - delta > 0.0:
        parts.append(f"{trials_to_decide(p, delta, delta, alpha, rho)} for one that dropped by delta")
    return (" (" + ", ".join(parts) + f", at the baseline's pass rate {p:.2f}; {len(b)} so far; "
            "`otel-assay plan` gives it per scenario with its cost)")


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
        b_arm, c_arm, s = r.baseline, r.candidate, r.settings
        pb, pc, paired_by = pairs(arms_b[r.scenario], arms_c[r.scenario], cfg.pairing)
        res = stats.anytime_regression(pb, pc, s.delta, cfg.alpha, s.beta)
        st = {"test": "anytime", "paired_by": paired_by, "pairs": res.n,
              "unused_baseline": b_arm.with_outcome - res.n, "unused_candidate": c_arm.with_outcome - res.n,
              "baseline_successes": b_arm.passes, "baseline_n": b_arm.with_outcome,
              "candidate_successes": c_arm.passes, "candidate_n": c_arm.with_outcome,
              "regressions": int(np.sum(pb & ~pc)), "improvements": int(np.sum(~pb & pc)),
              "drop": res.estimate, "drop_lower": res.lower, "drop_upper": res.upper,
              "e_pass": res.e_pass, "e_fail": res.e_fail, "pass_at": res.pass_at, "fail_at": res.fail_at,
              "pvalue": res.pvalue_fail, "pvalue_adjusted": None,
              "neg_log10_pvalue": -float(np.log10(res.pvalue_fail)) if res.pvalue_fail > 0 else None,
              "futile": res.futile, "delta": s.delta}
        check = Check("regression", INCONCLUSIVE, "", stats=st)
        r.checks.append(check)

        # every regression test is in the family, whatever its data: which tests enter must
        # not depend on the data, or the correction would not hold
        def finish(adjusted, check=check, res=res, s=s, pb=pb, pc=pc):
            p_adj = adjusted[0]
            check.stats["pvalue_adjusted"] = p_adj
            n, worse, better = res.n, check.stats["regressions"], check.stats["improvements"]
            pairs_said = (f"{n} pairs by {check.stats['paired_by']}: {worse} got worse, {better} better, "
                          f"drop {res.estimate:+.3f}")
            if p_adj < cfg.alpha:
                check.verdict, check.reason = FAIL, (
                    f"{pairs_said}; a significant drop (anytime {family.adjusted_tag()}p={p_adj:.3g} < "
                    f"alpha={cfg.alpha}, reached at {res.fail_at} pairs), lower bound {res.lower:.3f}")
            elif res.pass_at is not None:
                check.verdict, check.reason = PASS, (
                    f"{pairs_said}; upper {1 - cfg.alpha:.0%} bound on the drop {res.upper:.3f} < "
                    f"delta={s.delta} (reached at {res.pass_at} pairs)")
            else:
                check.reason = (f"{pairs_said}; undecided: the drop lies between {res.lower:.3f} and "
                                f"{res.upper:.3f} (anytime {family.adjusted_tag()}p={p_adj:.3g}), neither a "
                                f"significant drop nor below delta={s.delta}; more trials decide"
                                + _plan_hint(pb, pc, s.delta, cfg.alpha))

        family.add(check, [st["pvalue"]], finish)
