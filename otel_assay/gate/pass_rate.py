"""The pass-rate check: the candidate's pass rate against the threshold θ, per scenario.

Decided by the anytime-valid threshold test of ``stats.anytime`` over the candidate's trials
in run order, so that gating again after adding trials does not raise its error rates. Only
run when a threshold is configured, so that an unchanged candidate can deploy without one.
"""

from __future__ import annotations

from typing import Any

from .. import stats
from .arms import outcomes
from .config import GateConfig
from .family import Family
from .result import FAIL, INCONCLUSIVE, PASS, SKIPPED, Check, ScenarioResult


def pass_rate_checks(results: list[ScenarioResult], arms_c, cfg: GateConfig, family: Family) -> None:
    """The pass rate against θ per scenario. PASS: the PASS test reached 1/alpha (no
    correction, see Family); FAIL: the FAIL test's anytime p-value after the correction."""
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
        _, ok = outcomes(arms_c[r.scenario])
        v = stats.anytime_rate(ok, th, s.delta, cfg.alpha, s.beta)
        check = Check("pass_rate", INCONCLUSIVE, "", stats={
            "test": "anytime", "successes": a.passes, "n": a.with_outcome, "pass_rate": v.estimate,
            "ci_low": v.lower, "ci_high": v.upper, "threshold": th, "e_pass": v.e_pass, "e_fail": v.e_fail,
            "pass_at": v.pass_at, "fail_at": v.fail_at, "pvalue": v.pvalue_fail, "pvalue_adjusted": None})
        r.checks.append(check)

        def finish(adjusted, check=check, v=v, th=th):
            p_adj = adjusted[0]
            check.stats["pvalue_adjusted"] = p_adj
            said = f"{check.stats['successes']}/{check.stats['n']} passed"
            if p_adj < cfg.alpha:
                check.verdict, check.reason = FAIL, (
                    f"{said}; upper {1 - cfg.alpha:.0%} bound {v.upper:.3f} < threshold {th} "
                    f"(anytime {family.adjusted_tag()}p={p_adj:.3g}, reached at {v.fail_at} trials)")
            elif v.pass_at is not None:
                check.verdict, check.reason = PASS, (
                    f"{said}; lower {1 - cfg.alpha:.0%} bound {v.lower:.3f} >= threshold {th} "
                    f"(reached at {v.pass_at} trials)")
            elif v.fail_at is not None:
                check.reason = (f"{said}; upper bound {v.upper:.3f} < threshold {th} but not after "
                                f"{family.describe()} (adjusted p={p_adj:.3g})")
            else:
                check.reason = (f"{said}; the pass rate lies between {v.lower:.3f} and {v.upper:.3f}, "
                                f"which holds the threshold {th}: more trials decide")

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
