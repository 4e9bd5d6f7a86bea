"""``@otel_assay.stochastic``: a test whose body is one trial, judged by statistics.

>>> @otel_assay.stochastic(trials=50, threshold=0.85, alpha=0.05, method="sprt")
... def test_ticket_routing(agent):
...     return "billing" in agent("My payment failed")

With the pytest plugin (``otel_assay.pytest_plugin``, loaded through the ``pytest11`` entry
point) the body runs as trials under :func:`otel_assay.trial` (traces go to the lake at
``--assay-dir``), and the test

- passes on PASS (the anytime-valid interval is in the report and the junit properties),
- fails on FAIL, with the test's anytime-valid p-value and the effect size (Cohen's h),
- is skipped on INCONCLUSIVE, saying about how many more trials a decision needs.

A trial passes when the body returns a truthy value or ``None``, fails when it returns a
falsy value or raises (``AssertionError`` or any other exception); infrastructure errors
(network, rate limits, provider 5xx) are retried and excluded. As everywhere in otel-assay,
a trial with no LLM call and no tool step is an empty run and does not count.

``baseline="version=v1"`` also compares with that selection's trials of the same scenario
in the lake (the gate's regression test: anytime-valid, on pairs of trials by index): the
test then fails on a regression, not on the threshold alone. Without the plugin
(``-p no:otel_assay``) the body runs once as a plain test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from ..analyze.select import Selection, SelectorError
from ..errors import DataError, UsageError
from .scenarios import RunConfig, Scenario, Suite, parse_config

ATTR = "_otel_assay_stochastic"


@dataclass(frozen=True)
class StochasticSpec:
    trials: int = 50
    threshold: float = 0.85
    alpha: float = 0.05
    beta: float = 0.10
    delta: float = 0.10
    method: str = "sprt"
    baseline: str | None = None
    scenario: str | None = None
    timeout: float | None = None
    retries: int = 2
    concurrency: int = 1


def stochastic(trials: int = 50, threshold: float = 0.85, alpha: float = 0.05, beta: float = 0.10,
               delta: float = 0.10, method: str = "sprt", *, baseline: str | None = None,
               scenario: str | None = None, timeout: float | None = None, retries: int = 2,
               concurrency: int = 1) -> Callable:
    """Mark a test as stochastic: see the module docstring. ``trials`` is the fixed sample
    size (``method="fixed"``) or the SPRT's n_max (``method="sprt"``); ``scenario`` defaults
    to the test's name."""
    # timeout, retries and concurrency are checked like a scenario file's: a bad one used to
    # reach the trials (a negative or non-numeric timeout failed every trial, so a sound agent
    # FAILed; a negative concurrency raised from asyncio)
    cfg = parse_config({"trials": trials, "threshold": threshold, "alpha": alpha, "beta": beta, "delta": delta,
                        "method": method, "timeout": timeout, "retries": retries, "concurrency": concurrency},
                       "@stochastic")
    if cfg.method == "adaptive":
        raise UsageError("@stochastic: method must be fixed or sprt")
    if scenario is not None and (not isinstance(scenario, str) or not scenario):
        raise UsageError(f"@stochastic: scenario must be a non-empty string, got {scenario!r}")
    if baseline is not None:
        if not isinstance(baseline, str) or not baseline.strip():
            raise UsageError(f"@stochastic: baseline must be a selector string such as 'version=v1', got {baseline!r}")
        try:
            Selection.parse([baseline])
        except SelectorError as e:
            raise UsageError(f"@stochastic: baseline {baseline!r}: {e}") from None
    spec = StochasticSpec(cfg.trials, cfg.threshold, cfg.alpha, cfg.beta, cfg.delta, cfg.method, baseline,
                          scenario, cfg.timeout, cfg.retries, cfg.concurrency)

    def mark(fn):
        setattr(fn, ATTR, spec)
        return fn
    return mark


@dataclass
class StochasticResult:
    verdict: str
    scenario: str
    n: int
    successes: int
    ci_low: float | None
    ci_high: float | None
    pvalue: float | None = None
    effect_h: float | None = None
    difference: float | None = None
    more_trials_needed: int | None = None
    regression: Any = None
    run: Any = None
    properties: dict[str, Any] = field(default_factory=dict)
    raised: int = 0                   # counted trials whose body raised
    first_error: str | None = None    # "Type: message" of the first of them
    confidence: float = 0.95          # level of [ci_low, ci_high]: 1 - alpha

    def message(self) -> str:
        rate = f"{self.successes}/{self.n}"
        ci = f"[{self.ci_low:.3f}, {self.ci_high:.3f}]" if self.ci_low is not None else "n/a"
        head = f"{self.verdict}: {self.scenario} passed {rate} trials, {self.confidence:.0%} interval {ci}"
        if self.verdict == "FAIL":
            head += f"; p = {self.pvalue:.3g}, effect size h = {self.effect_h:+.3f} (difference {self.difference:+.3f})"
        if self.regression is not None:
            r = self.regression
            head += (f"; vs baseline {r.baseline_successes}/{r.baseline_n}: regression {r.verdict.value} "
                     f"(drop {r.drop:+.3f}, p = {r.pvalue:.3g})")
        if self.verdict == "INCONCLUSIVE":
            # imported here: the pytest plugin loads this module in every pytest session,
            # and the runner brings numpy, duckdb and the OTel SDK that only a run needs
            from .runner import more_trials_text

            head += "; " + more_trials_text(self.more_trials_needed, self.n, self.run.scenarios[0].config)
        if self.raised:
            head += f"; {self.raised} trial(s) raised, the first: {self.first_error}"
        return head


@dataclass(frozen=True)
class Regression:
    """The test's regression verdict against its baseline: the gate's regression test
    (``stats.anytime_regression`` on the same pairs), so a test and a gate agree."""

    verdict: Any                      # stats.Verdict
    baseline_successes: int
    baseline_n: int
    pairs: int
    paired_by: str
    drop: float
    pvalue: float


def _baseline_arm(lake: str, selector: str, scenario: str) -> dict:
    """The baseline's trials of ``scenario`` as the gate reads an arm (``gate.arms`` columns)."""
    # imported here: the pytest plugin loads this module in every pytest session; the
    # engine brings duckdb and pyarrow, needed only by a test with a baseline
    from ..analyze.engine import open_engine
    from ..gate.arms import arm_trials, by_scenario
    from ..gate.lakes import select
    from ..lake.files import LakeError

    try:
        eng = open_engine(lake, lambda e: e.materialize(["steps", "trials"]))
    except LakeError as e:
        raise DataError(f"baseline {selector}: cannot read the lake {lake}: {e}") from None
    try:
        select(eng, selector, "baseline_trials", lake)
        arm = by_scenario(arm_trials(eng, "baseline_trials")).get(scenario)
    finally:
        eng.close()
    known = 0 if arm is None else sum(bool(c) and p is not None and p == p for c, p in zip(arm["counted"], arm["passed"]))
    if not known:
        raise DataError(f"baseline {selector}: no counted trials of scenario {scenario!r} in {lake}")
    return arm


def run_stochastic(body: Callable[[], Any], spec: StochasticSpec, *, scenario: str, version: str,
                   lake: str) -> StochasticResult:
    """Run ``body`` (no arguments) as the trials of ``spec`` and judge it."""
    # imported here: the pytest plugin loads this module in every pytest session; numpy and
    # the runner load only when a stochastic test runs
    import numpy as np

    from ..gate.arms import outcomes
    from ..gate.regression import pairs
    from ..stats import Verdict, anytime_regression
    from .runner import run_suite

    method = "fixed" if spec.baseline else spec.method
    # n_max unset: the SPRT stops at trials, and the hint past it names the decorator's `trials=`
    cfg = RunConfig(trials=spec.trials, threshold=spec.threshold, alpha=spec.alpha, beta=spec.beta, delta=spec.delta,
                    method=method, timeout=spec.timeout, retries=spec.retries)

    def judge(output, _scenario):
        return (True if output is None else bool(output)), None, None

    suite = Suite(scenario, [Scenario(scenario, None, {}, judge, cfg)], cfg, source=f"test {scenario}")
    # the baseline is read before the trials run: a selector that matches nothing must not
    # cost a full set of trials first
    baseline_arm = _baseline_arm(lake, spec.baseline, scenario) if spec.baseline else None
    run = run_suite(suite, lambda _input: body(), version=version, lake=lake, concurrency=spec.concurrency,
                    resume=False)
    s = run.scenarios[0]
    # the body's own failures (judge gives no reason, so a reason is an exception's)
    raised = [r for r in s.records if r.reason and r.error_class not in ("infrastructure", "timeout")]
    if raised and len(raised) == len(s.records) and not any(r.n_steps for r in raised):
        # not one trial got as far as a step: a bug in the test, not a measured failure rate
        raise UsageError(f"{scenario}: every trial raised before recording a step, so there is nothing to "
                         f"judge; the first: {raised[0].reason}")
    if s.n == 0:
        raise UsageError(
            f"{scenario}: none of the {s.ran} trials counted ("
            + ", ".join(sorted({r.error_class or '?' for r in s.records})) + "): a trial counts when it records "
            "an LLM call or a tool step; instrument the agent (import otel_assay.auto) or record steps with otel_assay.step")
    p_hat = s.successes / s.n
    res = StochasticResult(s.decision if s.decision != "CONTINUE" else "INCONCLUSIVE", scenario, s.n, s.successes,
                           s.ci_low, s.ci_high, run=run, raised=sum(r.counted for r in raised),
                           first_error=next((r.reason for r in raised if r.counted), None),
                           confidence=1.0 - spec.alpha)
    res.pvalue = min(1.0, 1.0 / s.e_fail)  # the threshold test's anytime-valid p-value
    res.effect_h = 2 * math.asin(math.sqrt(p_hat)) - 2 * math.asin(math.sqrt(spec.threshold))
    res.difference = p_hat - spec.threshold
    res.more_trials_needed = s.more_trials_needed
    if spec.baseline:
        records = sorted((r for r in s.records if r.counted), key=lambda r: r.index)
        mine = {"trial_index": np.array([r.index for r in records]), "counted": np.ones(len(records), dtype=bool),
                "passed": np.array([bool(r.passed) for r in records], dtype=object)}
        pb, pc, paired_by = pairs(baseline_arm, mine, "auto")
        reg = anytime_regression(pb, pc, spec.delta, spec.alpha, spec.beta, bounds=False)
        _, ob = outcomes(baseline_arm)
        res.regression = Regression(reg.verdict, int(ob.sum()), len(ob), reg.n, paired_by, reg.estimate,
                                    reg.pvalue_fail)
        if reg.verdict is Verdict.FAIL or res.verdict == "FAIL":
            res.verdict = "FAIL"
            if reg.verdict is Verdict.FAIL:
                p_c = float(pc.mean()) if len(pc) else 0.0
                p_b = float(pb.mean()) if len(pb) else 0.0
                res.pvalue, res.difference = reg.pvalue_fail, -reg.estimate
                res.effect_h = 2 * math.asin(math.sqrt(p_c)) - 2 * math.asin(math.sqrt(p_b))
        elif reg.verdict is Verdict.PASS:
            res.verdict = "PASS"
        else:
            res.verdict = "INCONCLUSIVE"
            res.more_trials_needed = res.more_trials_needed or s.n
    props = {"assay_verdict": res.verdict, "assay_scenario": scenario, "assay_version": version,
             "assay_method": method, "assay_trials": s.n, "assay_successes": s.successes,
             "assay_pass_rate": round(p_hat, 6), "assay_threshold": spec.threshold, "assay_alpha": spec.alpha,
             "assay_trials_run": s.ran, "assay_excluded": s.excluded}
    if s.ci_low is not None:
        props.update(assay_ci_low=round(s.ci_low, 6), assay_ci_high=round(s.ci_high, 6))
    if method == "sprt":
        # the wealth each test reached (a test decides at 1 / alpha)
        props.update(assay_e_pass=round(s.e_pass, 6), assay_e_fail=round(s.e_fail, 6),
                     assay_sprt_stop=s.stop_reason or "")
    if res.verdict == "FAIL":
        props.update(assay_pvalue=res.pvalue, assay_effect_size_h=round(res.effect_h, 6),
                     assay_difference=round(res.difference, 6))
    if res.verdict == "INCONCLUSIVE" and res.more_trials_needed:
        props["assay_more_trials_needed"] = res.more_trials_needed
    if res.regression is not None:
        props.update(assay_baseline=spec.baseline, assay_baseline_trials=res.regression.baseline_n,
                     assay_baseline_successes=res.regression.baseline_successes,
                     assay_regression_verdict=res.regression.verdict.value,
                     assay_regression_pvalue=res.regression.pvalue)
    res.properties = props
    return res
