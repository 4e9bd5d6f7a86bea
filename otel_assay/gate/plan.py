"""How many trials a gate will need, before any is spent: the regression tests simulated at
the baseline's pass rates (or stated ones), with the token and dollar cost per trial the
lake recorded.

The numbers are for the rule the gate applies: the anytime-valid regression test, its
FAIL side held to the level the gate's correction gives the strictest of its FAIL tests,
simulated trial by trial (``stats.plan_anytime_regression``), so that a plan and a run
agree (tests/live checks them against each other)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import stats
from ..errors import DataError, UsageError
from .arms import arm_trials, by_scenario, outcomes
from .config import GateConfig
from .family import Family
from .lakes import open_lake, select

# the most trials per version a plan simulates: past it a test counts as undecided
N_MAX = 20_000


@dataclass(frozen=True)
class ScenarioPlan:
    """One scenario: the baseline's pass rate (and the trials it comes from), the simulated
    runs of an unchanged candidate and of one that dropped by delta, and the mean tokens and
    dollars of a baseline trial (None where no trial reported them)."""

    scenario: str
    baseline_rate: float
    baseline_trials: int | None
    unchanged: stats.AnytimePlan
    dropped: stats.AnytimePlan | None        # None when the rate is below delta
    tokens_per_trial: float | None
    cost_per_trial: float | None


@dataclass(frozen=True)
class Plan:
    scenarios: list[ScenarioPlan]
    delta: float
    alpha: float
    fail_level: float

    def as_dict(self) -> dict:
        def oc(p):
            return None if p is None else {"mean_trials": p.expected_n, "median_trials": p.median_n,
                                           "q90_trials": p.q90_n, "p_pass": p.p_pass, "p_fail": p.p_fail,
                                           "p_open": p.p_open, "n_max": p.n_max}
        return {"delta": self.delta, "alpha": self.alpha, "fail_level": self.fail_level,
                "scenarios": [{"scenario": s.scenario, "baseline_rate": s.baseline_rate,
                               "baseline_trials": s.baseline_trials, "unchanged": oc(s.unchanged),
                               "dropped_by_delta": oc(s.dropped), "tokens_per_trial": s.tokens_per_trial,
                               "cost_per_trial": s.cost_per_trial} for s in self.scenarios]}


def _simulate(name, rate, n, tokens, cost, stored, cfg: GateConfig, level: float, reps: int,
              seed: int) -> ScenarioPlan:
    st = cfg.for_scenario(name)
    p = float(np.clip(rate, 0.01, 0.99))
    # a stored baseline: candidates are simulated against its own outcomes, in index order
    kw = dict(n_max=N_MAX, reps=reps, seed=seed, fail_alpha=level, against=stored)
    same = stats.plan_anytime_regression(p, 0.0, st.delta, cfg.alpha, **kw)
    dropped = stats.plan_anytime_regression(p, st.delta, st.delta, cfg.alpha, **kw) if p - st.delta > 0 else None
    return ScenarioPlan(name, rate, n, same, dropped, tokens, cost)


def plan(lake: str | None, cfg: GateConfig, *, baseline: str | None = None, rate: float | None = None,
         reps: int = 1000, seed: int = 0) -> Plan:
    """The plan per scenario of ``baseline`` (a selector) in ``lake``, or for one stated pass
    ``rate`` (scenario "(stated)") when there is no lake to read."""
    if (lake is None) == (rate is None):
        raise UsageError("give a lake with its baseline (plan LAKE --baseline SEL) or a pass rate (--rate P)")
    if rate is not None and not 0.0 < rate < 1.0:
        raise UsageError(f"--rate must be a pass rate between 0 and 1, got {rate}")
    rows = []
    if rate is not None:
        rows.append(("(stated)", rate, None, None, None, None))
    else:
        eng = open_lake(lake, [baseline])
        try:
            select(eng, baseline, "plan_trials", lake)
            arms = by_scenario(arm_trials(eng, "plan_trials"))
            usage = {sc: (tok, usd) for sc, tok, usd in eng.rows(
                "SELECT scenario, avg(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)), avg(cost_usd) "
                "FROM trials SEMI JOIN plan_trials USING (trace_id) WHERE counted GROUP BY scenario")}
        finally:
            eng.close()
        for name in sorted(arms):
            idx, ok = outcomes(arms[name])
            if len(ok) == 0:
                continue
            if all(i is not None and i == i for i in idx) and len(set(idx.tolist())) == len(idx):
                ok = ok[np.argsort(idx.astype(np.int64), kind="stable")]  # the order pairs by index take
            tok, usd = usage.get(name, (None, None))
            rows.append((name, float(ok.mean()), len(ok), None if tok is None else float(tok),
                         None if usd is None else float(usd), ok))
        if not rows:
            raise DataError(f"{lake}: no trial of {baseline or 'the lake'} has an outcome: nothing to plan from")
    names = [r[0] for r in rows]
    m = 0
    for name in names:
        st = cfg.for_scenario(name)
        m += int(st.checks["regression"]) + int(st.checks["fingerprint"])
        m += int(st.checks["pass_rate"] and st.threshold is not None)
    level = Family(cfg.alpha, cfg.correction).level(max(m, 1))
    return Plan([_simulate(*r, cfg, level, reps, seed) for r in rows], cfg.delta, cfg.alpha, level)
