"""Multi-fidelity runs, after the AgentAssay paper's multi-fidelity proxy testing: spend part
of the trials on a cheap proxy agent (e.g. the same agent on a smaller model) whose behaviour
correlates with the target's, and combine the evidence, so fewer expensive trials are needed.

1. ``rho`` — the behavioural correlation of the two agents — is given, or estimated from
   ``calibration`` *paired* trials per scenario (same trial index on both; Pearson correlation
   of their per-trial fingerprints [steps, tool calls, tokens, passed], component-wise and
   averaged, as the paper defines rho; clipped to [0, 0.99]).
2. :func:`~otel_assay.stats.multi_fidelity_allocation` splits the fixed-sample size
   ``trials`` into n_target target trials and n_proxy proxy trials.
3. Both run under the trial API (versions ``V`` and ``V@proxy``) and, per scenario, the
   one-sided binomial p-values are combined by weighted Stouffer
   (:func:`~otel_assay.stats.multi_fidelity_combine`, weights rho and 1 - rho):
   FAIL when the combined p-value of H0: p >= threshold is < alpha, PASS when the combined
   p-value of H0: p <= threshold - delta is < alpha, INCONCLUSIVE otherwise.

Caveat (as in the paper): the proxy's p-value is evidence about the *proxy*; the combination
is only as good as the assumption that the proxy's pass rate tracks the target's. With
rho = 0 the proxy gets no weight and the result is the target's alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
from scipy.stats import binom

from ..errors import UsageError
from ..stats import multi_fidelity_allocation, multi_fidelity_combine
from .runner import run_suite
from .scenarios import Scenario, Suite


@dataclass
class MultiFidelityScenario:
    scenario: str
    decision: str
    target: tuple[int, int]          # (successes, n)
    proxy: tuple[int, int]
    p_fail: float                    # combined p-value of H0: p >= threshold
    p_pass: float                    # combined p-value of H0: p <= threshold - delta


@dataclass
class MultiFidelityResult:
    rho: float
    plan: Any
    scenarios: list[MultiFidelityScenario]
    calibration_trials: int

    def as_dict(self) -> dict[str, Any]:
        return {"rho": self.rho, "n_target": self.plan.n_target, "n_proxy": self.plan.n_proxy,
                "cost_ratio": self.plan.cost_ratio, "calibration_trials": self.calibration_trials,
                "scenarios": [s.__dict__ for s in self.scenarios]}


def _clip_p(p: float) -> float:
    return min(max(float(p), 1e-300), 1 - 1e-12)


def estimate_rho(target_records, proxy_records) -> float:
    """The behavioural correlation rho of the two agents: component-wise Pearson correlation of
    paired fingerprints, averaged over the components that vary in both; 0 when none do."""
    pairs = {r.index: r for r in target_records if r.counted}
    rows = [(pairs[r.index], r) for r in proxy_records if r.counted and r.index in pairs]
    if len(rows) < 3:
        return 0.0
    f = lambda r: [r.n_steps, r.n_tools, r.tokens, float(bool(r.passed))]  # noqa: E731
    a = np.array([f(t) for t, _ in rows], dtype=float)
    b = np.array([f(p) for _, p in rows], dtype=float)
    cors = [np.corrcoef(a[:, j], b[:, j])[0, 1] for j in range(a.shape[1]) if a[:, j].std() > 0 and b[:, j].std() > 0]
    return float(np.clip(np.mean(cors), 0.0, 0.99)) if cors else 0.0


def run_multi_fidelity(suite, target: Callable, proxy: Callable, *, version: str, lake: str,
                       cost_ratio: float, rho: float | None = None, calibration: int = 10,
                       concurrency: int | None = None) -> MultiFidelityResult:
    if not 0 < cost_ratio < 1:
        raise UsageError(f"cost_ratio (proxy cost / target cost) must be in (0, 1), got {cost_ratio}")

    def fixed(n):
        return Suite(suite.name, [Scenario(s.name, s.input, s.properties, s.evaluator,
                                           replace(s.config, method="fixed", trials=n)) for s in suite.scenarios],
                     replace(suite.config, method="fixed", trials=n), source=suite.source)

    cal_trials = 0
    if rho is None:
        t_cal = run_suite(fixed(calibration), target, version=version, lake=lake, concurrency=concurrency)
        p_cal = run_suite(fixed(calibration), proxy, version=f"{version}@proxy", lake=lake, concurrency=concurrency)
        rhos = [estimate_rho(a.records, b.records) for a, b in zip(t_cal.scenarios, p_cal.scenarios)]
        rho = float(np.mean(rhos))
        cal_trials = sum(s.ran for s in t_cal.scenarios) + sum(s.ran for s in p_cal.scenarios)
    if not 0 <= rho < 1:
        raise UsageError(f"rho must be in [0, 1), got {rho}")
    plan = multi_fidelity_allocation(suite.config.trials, rho, cost_ratio)
    # resumption tops both arms up to the plan (the calibration trials count towards it)
    t_run = run_suite(fixed(plan.n_target), target, version=version, lake=lake, concurrency=concurrency)
    p_run = (run_suite(fixed(plan.n_proxy), proxy, version=f"{version}@proxy", lake=lake, concurrency=concurrency)
             if plan.n_proxy else None)
    out = []
    for i, s in enumerate(suite.scenarios):
        cfg = s.config
        kt, nt = t_run.scenarios[i].successes, t_run.scenarios[i].n
        kp, np_ = (p_run.scenarios[i].successes, p_run.scenarios[i].n) if p_run else (0, 0)
        pf_t = _clip_p(binom.cdf(kt, nt, cfg.threshold)) if nt else 0.5
        pp_t = _clip_p(binom.sf(kt - 1, nt, cfg.threshold - cfg.delta)) if nt else 0.5
        if np_:
            pf = multi_fidelity_combine(_clip_p(binom.cdf(kp, np_, cfg.threshold)), pf_t, rho).pvalue
            pp = multi_fidelity_combine(_clip_p(binom.sf(kp - 1, np_, cfg.threshold - cfg.delta)), pp_t, rho).pvalue
        else:
            pf, pp = pf_t, pp_t
        decision = "FAIL" if pf < cfg.alpha else "PASS" if pp < cfg.alpha else "INCONCLUSIVE"
        out.append(MultiFidelityScenario(s.name, decision, (kt, nt), (kp, np_), float(pf), float(pp)))
    return MultiFidelityResult(rho, plan, out, cal_trials)
