"""The regression check: did the candidate's pass rate drop from the baseline's, per scenario.

FAIL on a significant drop, PASS on non-inferiority (the drop is below δ), both decided by
the anytime-valid tests of ``stats.anytime``: users gate, add trials and gate again, and a
test read at every look must not err more often for it. The tests see the trials as pairs:
by trial index when both versions ran the same indices (the same inputs, so what an input
does to both cancels out), else in run order, the longer arm's extra trials unused.

A baseline of ``MIN_RUNS`` or more runs shows how much its pass rate varies from run to run
(the provider's model, a tool's load); the tests then need the drop to clear the margin
that variation alone rarely exceeds, since every trial of the candidate's run shares that
run's shift and more trials do not average it away (see ``stats.between_runs``).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .. import stats
from .arms import outcome_runs, outcomes
from .config import GateConfig
from .family import Family
from .result import FAIL, INCONCLUSIVE, PASS, SKIPPED, Check, ScenarioResult

# simulated runs behind each "trials to decide" estimate: enough for a tenth either way
PLAN_REPS = 200
# the fewest baseline runs from which the regression test widens for their variation. Two
# runs give the between-run variance one degree of freedom: in simulation (200 trials per
# arm, p = .8) an unchanged agent still FAILed 6 % of gates at alpha = .05 with a
# between-run SD of .1 or .2; from 3 runs the rate held alpha at every SD tried (0 to .2)
MIN_RUNS = 3


def _by_index(ib, ic) -> tuple[np.ndarray, np.ndarray] | None:
    """Positions in each arm of the trial indices both arms ran, in index order; None when an
    arm has a trial without an index or two with one index (two runs of a version), or the
    arms share no index. Which trials pair depends on their indices alone, never on
    outcomes, so the choice cannot bend the error rates."""
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
    return at_b, at_c


def round_robin(runs: np.ndarray) -> np.ndarray:
    """An order of trials that takes the runs in turn: the first trial of each run (runs in the
    order they began), then the second of each, and so on. Each run's shift then weighs
    alike on every stretch of pairs, which the tests' bets, sized from the pairs so far, need
    to see the mean drop rather than one run's."""
    if len(runs) == 0:
        return np.zeros(0, dtype=int)
    _, first, which = np.unique(runs, return_index=True, return_inverse=True)
    run_rank = np.argsort(np.argsort(first))[which]
    within = np.zeros(len(runs), dtype=int)
    seen: dict[int, int] = {}
    for i, r in enumerate(run_rank):
        within[i] = seen.get(r, 0)
        seen[r] = within[i] + 1
    return np.lexsort((run_rank, within))


def pairs(arm_b, arm_c, pairing: str, *, interleave: bool = False) -> tuple[np.ndarray, np.ndarray, str]:
    """(baseline outcomes, candidate outcomes, how they pair): the i-th of each is a pair.
    By trial index where both arms ran the same indices (with ``pairing: auto``), else the
    two arms in run order, the longer one's extra trials unused. ``interleave``: the
    baseline's runs take turns in the pairs' order (see :func:`round_robin`); in run order,
    that also takes each run's first trials when the baseline has more than the candidate."""
    ib, ob = outcomes(arm_b)
    ic, oc = outcomes(arm_c)
    turns = round_robin(outcome_runs(arm_b)) if interleave else np.arange(len(ob))
    if pairing == "auto":
        by_index = _by_index(ib, ic)
        if by_index is not None:
            at_b, at_c = by_index
            if interleave:
                order = np.argsort(np.argsort(turns)[at_b], kind="stable")
                at_b, at_c = at_b[order], at_c[order]
            return ob[at_b], oc[at_c], "trial index"
    n = min(len(ob), len(oc))
    return ob[turns][:n], oc[:n], "run order"


def run_variation(arm_b) -> tuple[int, stats.BetweenRuns | None]:
    """(the baseline's runs with outcomes, how much its pass rate varies between them), the
    latter None with fewer than ``MIN_RUNS`` (too few to tell)."""
    runs = outcome_runs(arm_b)
    _, ok = outcomes(arm_b)
    names, which = np.unique(runs, return_inverse=True)
    if len(names) < MIN_RUNS:
        return len(names), None
    return len(names), stats.between_run_variance(
        np.bincount(which, weights=ok.astype(float), minlength=len(names)), np.bincount(which, minlength=len(names)))


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


def _unpaired_baseline(arm_b, arm_c, paired_by: str, paired: int) -> np.ndarray:
    """The baseline's outcomes no candidate trial pairs with yet, in the order further
    candidate trials would pair with them: by index, the indices the candidate has not run;
    in run order, the baseline's trials after the pairs."""
    ib, ob = outcomes(arm_b)
    if paired_by == "trial index":
        ic, _ = outcomes(arm_c)
        rest = ~np.isin(ib.astype(np.int64), ic.astype(np.int64))
        return ob[rest][np.argsort(ib[rest].astype(np.int64), kind="stable")]
    return ob[paired:]


def _plan_hint(pb: np.ndarray, pc: np.ndarray, rest: np.ndarray, delta: float, alpha: float, level: float) -> str:
    """How many more pairs the tests need to decide, for an unchanged agent and for one that
    dropped by delta: from where the tests stand, paired with the baseline's own unpaired
    trials (as ``otel-assay plan`` pairs with them, and as a run of further candidate trials
    meets them), or, when the baseline has none left, on average at its pass rate for a run
    of both versions."""
    both = np.concatenate([pb, rest]).astype(bool)
    p = float(np.clip(round(float(both.mean()), 2) if len(both) else 0.8, 0.02, 0.98))
    if len(rest) == 0:
        rho = 0.0
        if len(pb) >= 10 and pb.std() > 0 and pc.std() > 0:
            rho = float(np.clip(round(float(np.corrcoef(pb, pc)[0, 1]), 1), 0.0, 0.9))
        parts = [f"{trials_to_decide(p, 0.0, delta, alpha, rho)} pairs decide for an unchanged agent on average"]
        if p - delta > 0.0:
            parts.append(f"{trials_to_decide(p, delta, delta, alpha, rho)} for one that dropped by delta")
        return (" (the baseline has no trial left to pair with, so both versions need more: " + ", ".join(parts)
                + f", at the baseline's pass rate {p:.2f}; {len(pb)} so far; `otel-assay plan` gives it per "
                "scenario with its cost)")
    parts, short = [], 0
    for drop, who in ((0.0, "for an unchanged agent"), (delta, "for one that dropped by delta")):
        if p - drop <= 0.0:
            continue
        plan = stats.plan_anytime_regression(p, drop, delta, alpha, n_max=len(both), reps=PLAN_REPS, seed=0,
                                             baseline=pb, candidate=pc, fail_alpha=level, against=both)
        if plan.p_open > 0.1:
            short += 1
            parts.append(f"more than its {len(rest)} {who}")
        else:
            parts.append(f"about {plan.expected_n - len(pb):.0f} more candidate trials decide {who} on average")
    if short == len(parts):
        return (f" (from where the tests stand, the baseline's {len(rest)} unpaired trials are likely too few to "
                "decide: run the baseline on more trials too; `otel-assay plan` gives it per scenario with its cost)")
    return (f" (from where the tests stand, paired with the baseline's {len(rest)} unpaired trials: "
            + ", ".join(parts) + "; `otel-assay plan` gives it per scenario with its cost)")


def regression_test(arm_b, arm_c, delta: float, alpha: float, beta: float, pairing: str, *, bounds: bool = True):
    """The regression test on two arms' trials: (the anytime result, the paired baseline and
    candidate outcomes, how they paired, the baseline's runs, their variation or None)."""
    k, runs = run_variation(arm_b)
    pb, pc, paired_by = pairs(arm_b, arm_c, pairing, interleave=runs is not None)
    # the candidate's runs are taken as one (k_candidate 1): its trials pair in run order, not
    # averaged across its runs, so one run's shift can carry the whole candidate side
    res = stats.anytime_regression(pb, pc, delta, alpha, beta, bounds=bounds,
                                   run_margin=None if runs is None else runs.margin)
    return res, pb, pc, paired_by, k, runs


def _runs_said(k: int, runs: stats.BetweenRuns | None, margin: float, delta: float) -> str:
    """How the baseline's runs widened the tests, in words."""
    if k == 2:
        return (f" (the baseline's 2 runs are too few to tell how much runs vary, so the test assumes they "
                f"do not; it widens for their variation from {MIN_RUNS} runs)")
    if runs is None:
        return ""
    if margin == 0.0:
        return (f" (the baseline's {runs.k} runs vary no more than their trials' noise: between-run SD 0, "
                "no margin)")
    said = (f" (the baseline's {runs.k} runs vary: between-run SD {runs.tau:.3f} of the pass rate, which "
            f"shifts a whole run; the drop must exceed {margin:.3f} to count")
    if margin >= delta:
        return said + (", and no number of the candidate's trials can show it below delta, since each run's "
                       "shift is shared by all its trials; more baseline runs narrow the margin)")
    return said + f", and stay below {delta - margin:.3f} to be below delta)"


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
        res, pb, pc, paired_by, k, runs = regression_test(arms_b[r.scenario], arms_c[r.scenario], s.delta, cfg.alpha,
                                                       s.beta, cfg.pairing)
        st = {"test": "anytime", "paired_by": paired_by, "pairs": res.n,
              "unused_baseline": b_arm.with_outcome - res.n, "unused_candidate": c_arm.with_outcome - res.n,
              "baseline_successes": b_arm.passes, "baseline_n": b_arm.with_outcome,
              "candidate_successes": c_arm.passes, "candidate_n": c_arm.with_outcome,
              "regressions": int(np.sum(pb & ~pc)), "improvements": int(np.sum(~pb & pc)),
              "drop": res.estimate, "drop_lower": res.lower, "drop_upper": res.upper,
              "e_pass": res.e_pass, "e_fail": res.e_fail, "pass_at": res.pass_at, "fail_at": res.fail_at,
              "pvalue": res.pvalue_fail, "pvalue_adjusted": None,
              "neg_log10_pvalue": -float(np.log10(res.pvalue_fail)) if res.pvalue_fail > 0 else None,
              "futile": res.futile, "delta": s.delta,
              "baseline_runs": k,
              "between_run_sd": None if runs is None else runs.tau, "run_margin": res.margin}
        check = Check("regression", INCONCLUSIVE, "", stats=st)
        r.checks.append(check)

        # every regression test is in the family, whatever its data: which tests enter must
        # not depend on the data, or the correction would not hold
        rest = _unpaired_baseline(arms_b[r.scenario], arms_c[r.scenario], paired_by, res.n)

        def finish(adjusted, check=check, res=res, s=s, pb=pb, pc=pc, k=k, runs=runs, rest=rest):
            p_adj = adjusted[0]
            check.stats["pvalue_adjusted"] = p_adj
            n, worse, better = res.n, check.stats["regressions"], check.stats["improvements"]
            pairs_said = (f"{n} pairs by {check.stats['paired_by']}: {worse} got worse, {better} better, "
                          f"drop {res.estimate:+.3f}" + _runs_said(k, runs, res.margin, s.delta))
            # <=: with a run margin the p-value is a level of a grid, alpha among them
            if p_adj <= cfg.alpha:
                check.verdict, check.reason = FAIL, (
                    f"{pairs_said}; a significant drop (anytime {family.adjusted_tag()}p={p_adj:.3g} "
                    f"{'<=' if p_adj == cfg.alpha else '<'} "
                    f"alpha={cfg.alpha}, reached at {res.fail_at} pairs), lower bound {res.lower:.3f}")
            elif res.pass_at is not None:
                check.verdict, check.reason = PASS, (
                    f"{pairs_said}; upper {1 - cfg.alpha:.0%} bound on the drop {res.upper:.3f} < "
                    f"delta={s.delta} (reached at {res.pass_at} pairs)")
            else:
                # the plan simulates the tests without a run margin: with one, it says too few
                more = ("more trials decide" + _plan_hint(pb, pc, rest, s.delta, cfg.alpha, family.level())
                        if res.margin == 0.0 else
                        "more trials decide, more than the tests would need without the runs' variation"
                        if res.margin < s.delta else "more baseline runs, or a baseline run in the same job, decide")
                check.reason = (f"{pairs_said}; undecided: the drop lies between {res.lower:.3f} and "
                                f"{res.upper:.3f} (anytime {family.adjusted_tag()}p={p_adj:.3g}), neither a "
                                f"significant drop nor below delta={s.delta}; {more}")

        family.add(check, [st["pvalue"]], finish)
