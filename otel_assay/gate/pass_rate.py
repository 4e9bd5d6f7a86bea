"""The pass-rate check: the candidate's pass rate against the threshold θ, per scenario.

The Wilson interval decides, and on small samples the exact binomial test must confirm
each decision: the interval alone is too eager on a handful of trials. Only run when a
threshold is configured, so that an unchanged candidate can deploy without one.
"""

from __future__ import annotations

from typing import Any

from .. import stats
from .arms import outcomes
from .config import GateConfig
from .family import Family
from .result import FAIL, INCONCLUSIVE, PASS, SKIPPED, Check, ScenarioResult

def rate_reason(v, verb: str = "contains") -> str:
    """Why a pass-rate verdict is neither PASS nor FAIL: the interval holds the threshold, or
    a bound is past it but the exact binomial test (which guards small samples) disagrees."""
    th = v.threshold
    if v.ci.high < th:
        return (f"upper bound {v.ci.high:.3f} < threshold {th}, but on {v.n} trials the exact binomial test "
                f"does not confirm it (p={v.pvalue_fail:.3g} >= alpha={v.alpha:.3g}); more trials would decide")
    if v.ci.low >= th:
        return (f"lower bound {v.ci.low:.3f} >= threshold {th}, but on {v.n} trials the exact binomial test "
                f"does not confirm it (p={v.pvalue_pass:.3g} >= alpha={v.alpha:.3g}); more trials would decide")
    return f"interval [{v.ci.low:.3f}, {v.ci.high:.3f}] {verb} threshold {th}"



def pass_rate_checks(results: list[ScenarioResult], cfg: GateConfig, family: Family) -> None:
    """The pass rate against θ per scenario. PASS: the verdict's PASS (no correction, see Family);
    FAIL: its FAIL p-value (Wilson bound and exact binomial test) after the correction."""
    for r in results:
        s = r.settings
        if not s.checks["pass_rate"]:
            continue
        if s.threshold is None:
            continue
        if r.candidate.trials == 0:
            # a scenario only the baseline ran: open, as the regression check has it; SKIPPED
            # ("no outcome") left it unjudged, so with pass_rate the only gating check a
            # candidate that dropped a scenario deployed
            r.checks.append(Check("pass_rate", INCONCLUSIVE, "the candidate did not run this scenario"))
            continue
        if r.candidate.with_outcome == 0:
            r.checks.append(Check("pass_rate", SKIPPED, "no candidate trial has an outcome; judged by the "
                                  "checks that need none (fingerprint, stability, coverage)", gating=False))
            continue
        a, th = r.candidate, s.threshold
        v = stats.verdict(a.passes, a.with_outcome, th, cfg.alpha)
        n_star = None
        if 0 < th - s.delta:
            n_star = stats.sample_size_threshold(th, s.delta, cfg.alpha, s.beta)
        check = Check("pass_rate", INCONCLUSIVE, "", stats={
            "successes": a.passes, "n": a.with_outcome, "pass_rate": v.estimate, "ci_low": v.ci.low,
            "ci_high": v.ci.high, "threshold": th, "pvalue": v.pvalue_fail, "pvalue_adjusted": None,
            "n_star": n_star})
        r.checks.append(check)

        def finish(adjusted, check=check, v=v):
            p_adj = adjusted[0]
            check.stats["pvalue_adjusted"] = p_adj
            th = v.threshold
            if v.verdict is stats.Verdict.PASS:
                check.verdict, check.reason = PASS, f"lower {1 - cfg.alpha:.0%} bound {v.ci.low:.3f} >= threshold {th}"
            elif p_adj < cfg.alpha:
                check.verdict, check.reason = FAIL, (f"upper bound {v.ci.high:.3f} < threshold {th} "
                                                     f"({family.adjusted_tag()}p={p_adj:.3g})")
            elif v.verdict is stats.Verdict.FAIL:
                check.reason = (f"upper bound {v.ci.high:.3f} < threshold {th} but not after "
                                f"{family.describe()} (adjusted p={p_adj:.3g})")
            else:
                check.reason = rate_reason(v)

        family.add(check, [v.pvalue_fail], finish)



def sprt_paths(results: list[ScenarioResult], arms_c, cfg: GateConfig) -> dict[str, Any]:
    """For the HTML plot: Wald's SPRT over the candidate's trials in run order, against the
    threshold, or the baseline's pass rate when there is none."""
    out = {}
    for r in results:
        if r.scenario not in arms_c:
            continue
        s = r.settings
        theta, from_baseline = s.threshold, False
        if theta is None and r.baseline is not None and r.baseline.rate is not None:
            theta, from_baseline = r.baseline.rate, True
        _, ok = outcomes(arms_c[r.scenario])
        if theta is None or not (s.delta < theta < 1.0) or len(ok) == 0:
            continue
        test = stats.SPRT(theta, s.delta, cfg.alpha, s.beta)
        for o in ok:
            if test.state.done:
                break
            test.update(bool(o))
        d = test.design
        out[r.scenario] = {"path": [float(x) for x in test.path], "lower": d.lower, "upper": d.upper,
                           "decision": test.state.decision, "theta": theta, "theta_from_baseline": from_baseline}
    return out
