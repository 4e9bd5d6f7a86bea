"""Confidence intervals for a pass rate and the three-valued verdict (PASS / FAIL /
INCONCLUSIVE) that the AgentAssay paper builds on them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import bdtr, bdtrc, betaincinv, ndtri

from ._common import Verdict, check_alternative, check_open_unit, check_trials

_ALTERNATIVES = ("two-sided", "less", "greater")


@dataclass(frozen=True)
class ProportionCI:
    """A confidence interval for a binomial proportion.

    ``alternative`` follows scipy: ``"greater"`` is a one-sided lower bound (high = 1),
    ``"less"`` a one-sided upper bound (low = 0).
    """

    estimate: float
    low: float
    high: float
    successes: int
    n: int
    confidence_level: float
    alternative: str
    method: str


@dataclass(frozen=True)
class VerdictResult:
    """Outcome of :func:`verdict`: PASS / FAIL / INCONCLUSIVE with the interval behind it.

    ``pvalue_fail`` (``pvalue_pass``) is the p-value of the test behind a FAIL (PASS), on
    alpha's scale: the verdict at any level alpha FAILs (PASSes) when it is < alpha, up to
    ties. A suite that corrects its FAILs for multiplicity adjusts ``pvalue_fail``.
    """

    verdict: Verdict
    estimate: float
    ci: ProportionCI
    threshold: float
    alpha: float
    successes: int
    n: int
    method: str
    pvalue_fail: float = 1.0
    pvalue_pass: float = 1.0


def _z(alpha: float, alternative: str) -> float:
    return float(ndtri(1.0 - alpha / 2.0) if alternative == "two-sided" else ndtri(1.0 - alpha))


def wilson_bounds(successes, n, z, continuity_correction: bool = False):
    """Vectorised Wilson score bounds for arrays of counts at quantile ``z``.

    ``continuity_correction=True`` gives the continuity-corrected Wilson interval (Newcombe 1998,
    method 4), as scipy's ``"wilsoncc"``. Exact 0 and 1 at k = 0 and k = n, where the closed
    form only reaches them up to rounding (as scipy). No validation: callers validate.
    """
    k = np.asarray(successes, dtype=float)
    n = np.asarray(n, dtype=float)
    p = k / n
    q = 1.0 - p
    denom = 2.0 * (n + z * z)
    center = (2.0 * n * p + z * z) / denom
    if continuity_correction:
        # the radicands are negative only at k = 0 (low) / k = n (high), which are overridden
        half_lo = (1.0 + z * np.sqrt(np.maximum(z * z - 2.0 - 1.0 / n + 4.0 * p * (n * q + 1.0), 0.0))) / denom
        half_hi = (1.0 + z * np.sqrt(np.maximum(z * z + 2.0 - 1.0 / n + 4.0 * p * (n * q - 1.0), 0.0))) / denom
    else:
        half_lo = half_hi = z / denom * np.sqrt(4.0 * n * p * q + z * z)
    low = np.where(k == 0, 0.0, np.maximum(center - half_lo, 0.0))
    high = np.where(k == n, 1.0, np.minimum(center + half_hi, 1.0))
    return low, high


def wilson_interval(
    successes: int, n: int, alpha: float = 0.05, alternative: str = "two-sided",
    continuity_correction: bool = False,
) -> ProportionCI:
    """Wilson score interval for ``successes`` out of ``n`` at level 1 - alpha.

    Two-sided uses z = z_{1-alpha/2}; one-sided (``"greater"`` lower bound, ``"less"``
    upper bound) uses z = z_{1-alpha}. Identical to
    ``scipy.stats.binomtest(successes, n).proportion_ci(1 - alpha, "wilson")`` (``"wilsoncc"``
    with ``continuity_correction=True``).
    """
    successes, n = check_trials(successes, n)
    alpha = check_open_unit("alpha", alpha)
    check_alternative(alternative, _ALTERNATIVES)
    low, high = wilson_bounds(successes, n, _z(alpha, alternative), continuity_correction)
    low, high = float(low), float(high)
    if alternative == "less":
        low = 0.0
    elif alternative == "greater":
        high = 1.0
    return ProportionCI(successes / n, low, high, successes, n, 1.0 - alpha, alternative,
                       "wilsoncc" if continuity_correction else "wilson")


def clopper_pearson_interval(
    successes: int, n: int, alpha: float = 0.05, alternative: str = "two-sided"
) -> ProportionCI:
    """Clopper-Pearson ("exact") interval from Beta quantiles.

    Guarantees coverage >= 1 - alpha for every true p (Wilson only approximately), at the
    price of width. Matches ``scipy.stats.binomtest(...).proportion_ci(1 - alpha, "exact")``.
    """
    successes, n = check_trials(successes, n)
    alpha = check_open_unit("alpha", alpha)
    check_alternative(alternative, _ALTERNATIVES)
    tail = alpha / 2.0 if alternative == "two-sided" else alpha
    low = 0.0 if successes == 0 or alternative == "less" else float(betaincinv(successes, n - successes + 1, tail))
    high = 1.0 if successes == n or alternative == "greater" else float(betaincinv(successes + 1, n - successes, 1.0 - tail))
    return ProportionCI(successes / n, low, high, successes, n, 1.0 - alpha, alternative, "clopper-pearson")


_INTERVALS = {"wilson": wilson_interval, "clopper-pearson": clopper_pearson_interval}


def exact_pvalues(successes: int, n: int, threshold: float) -> tuple[float, float]:
    """One-sided exact binomial p-values against ``threshold``: (P(X <= successes), P(X >= successes))
    for X ~ Bin(n, threshold), the tests of H1: p < threshold and H1: p > threshold. As
    ``scipy.stats.binomtest(successes, n, threshold, alternative="less" / "greater").pvalue``."""
    k, n = check_trials(successes, n)
    threshold = check_open_unit("threshold", threshold)
    below = float(bdtr(k, n, threshold))
    above = 1.0 if k == 0 else float(bdtrc(k - 1, n, threshold))
    return min(below, 1.0), min(above, 1.0)


def _score_pvalues(k: int, n: int, threshold: float) -> tuple[float, float]:
    """One-sided score-test p-values (H1: p < threshold, H1: p > threshold); the Wilson bounds
    are this test inverted, so the upper bound at level 1 - alpha is < threshold exactly when
    the first is < alpha / 2."""
    z = (threshold - k / n) / math.sqrt(threshold * (1.0 - threshold) / n)
    return 0.5 * math.erfc(z / math.sqrt(2.0)), 0.5 * math.erfc(-z / math.sqrt(2.0))


def verdict(successes: int, n: int, threshold: float, alpha: float = 0.05, method: str = "wilson") -> VerdictResult:
    """Three-valued pass-rate verdict (the AgentAssay paper's stochastic verdict).

    With the two-sided 1 - alpha interval [L, U] for the pass rate: PASS if L >= threshold,
    FAIL if U < threshold, INCONCLUSIVE otherwise; with Wilson (the paper's default) each
    decision also needs the exact one-sided binomial test at alpha to agree:
    P(X <= k | threshold) <= alpha for a FAIL, P(X >= k | threshold) <= alpha for a PASS.

    Why the exact test: the Wilson interval is a normal approximation and on few trials it
    claims more than the data hold. 0/1 at threshold 0.9 has U = 0.79, so the bare rule FAILs
    an agent whose true rate is 0.9 with probability 0.1 (0.16 at n = 17, threshold 0.99),
    and 4/4 at threshold 0.5 PASSes one at 0.5 with probability 0.0625. The exact test holds
    both errors to P(FAIL | p >= threshold) <= alpha and P(PASS | p < threshold) <= alpha at
    every n and threshold (the soundness the paper proves only for exact intervals, now true
    for Wilson too). It binds only on small samples (at alpha = 0.05 a FAIL for threshold 0.9
    up to n = 35, for 0.99 up to n = 474; a PASS at thresholds >= 0.6 with alpha <= 0.05
    never, up to n = 1000), so elsewhere the verdict is Wilson's, each decision with the
    interval's one-sided alpha/2 rate asymptotically. With ``method="clopper-pearson"`` the
    interval is exact already: each error is <= alpha/2.

    The paper's worked example: 45/50 at threshold 0.85 is INCONCLUSIVE (95 % Wilson interval
    [0.786, 0.957]), 90/100 too, 180/200 PASSes.
    """
    threshold = check_open_unit("threshold", threshold)
    alpha = check_open_unit("alpha", alpha)
    if method not in _INTERVALS:
        raise ValueError(f"method must be one of {tuple(_INTERVALS)}, got {method!r}")
    ci = _INTERVALS[method](successes, n, alpha)
    exact_below, exact_above = exact_pvalues(ci.successes, ci.n, threshold)
    if method == "wilson":
        score_below, score_above = _score_pvalues(ci.successes, ci.n, threshold)
        # the interval's bound is a one-sided alpha/2 claim (2 x the score p-value); the exact
        # test at alpha caps the error where that approximation is anti-conservative
        p_fail = max(min(2.0 * score_below, 1.0), exact_below)
        p_pass = max(min(2.0 * score_above, 1.0), exact_above)
    else:  # Clopper-Pearson's bounds are the exact tests at alpha/2
        p_fail, p_pass = min(2.0 * exact_below, 1.0), min(2.0 * exact_above, 1.0)
    if ci.low >= threshold and exact_above <= alpha:
        v = Verdict.PASS
    elif ci.high < threshold and exact_below <= alpha:
        v = Verdict.FAIL
    else:
        v = Verdict.INCONCLUSIVE
    return VerdictResult(v, ci.estimate, ci, threshold, alpha, ci.successes, ci.n, method, p_fail, p_pass)


def sample_size_threshold(pass_rate: float, delta: float, alpha: float = 0.05, beta: float = 0.2) -> int:
    """Trials for the single-version threshold test, as the AgentAssay paper sizes it.

    n* = ceil((z_{1-alpha/2} + z_{1-beta})^2 * 2 p (1 - p) / delta^2), with the two-sided
    quantile the paper specifies for this test (the regression test uses the one-sided one).
    For the paper's SPRT example (p = 0.9, delta = 0.1, alpha = 0.05, beta = 0.1) this is
    190, not the paper's "~109".
    """
    pass_rate = check_open_unit("pass_rate", pass_rate)
    delta = check_open_unit("delta", delta)
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    z = ndtri(1.0 - alpha / 2.0) + ndtri(1.0 - beta)
    return int(math.ceil(z * z * 2.0 * pass_rate * (1.0 - pass_rate) / (delta * delta) - 1e-9))
