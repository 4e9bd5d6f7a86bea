"""Two-version regression tests on pass rates: the AgentAssay paper's regression verdict,
effect sizes and power, with a non-inferiority PASS rule in place of the paper's power rule.

Convention everywhere: ``b`` is the baseline, ``c`` the candidate, and a regression is
p_c < p_b. Differences are p_b - p_c, so a positive difference is a drop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
# scipy.special, not scipy.stats: importing scipy.stats costs about 2 s, a fifth of a gate run
from scipy.special import gammaln, log_ndtr, logsumexp, ndtr, ndtri

from ._common import (
    Verdict,
    check_alternative,
    check_count,
    check_open_unit,
    check_trials,
    neg_log10,
)
from .multiple import adjust_pvalues
from .proportions import wilson_bounds

_ALTERNATIVES = ("greater", "less", "two-sided")


def _check_two_arms(k_b, n_b, k_c, n_c):
    k_b, n_b = check_trials(k_b, n_b, successes_name="baseline_successes", n_name="baseline_n")
    k_c, n_c = check_trials(k_c, n_c, successes_name="candidate_successes", n_name="candidate_n")
    return k_b, n_b, k_c, n_c


# --------------------------------------------------------------------------- Fisher


@dataclass(frozen=True)
class FisherResult:
    """Fisher's exact test on the 2x2 table [[k_b, n_b - k_b], [k_c, n_c - k_c]].

    ``statistic`` is the sample odds ratio (scipy's), ``alternative="greater"`` is H1: p_b > p_c.
    """

    statistic: float
    pvalue: float
    log_pvalue: float
    neg_log10_pvalue: float
    alternative: str
    table: tuple[tuple[int, int], tuple[int, int]]


def _fisher_log_pvalue(k_b: int, n_b: int, k_c: int, n_c: int, alternative: str) -> float:
    # Conditional on the margins, k_b ~ Hypergeometric(N = n_b + n_c, K = k_b + k_c, draws = n_b).
    # Summing log-pmfs with logsumexp keeps tiny p-values (1e-400) instead of rounding to 0.
    n = n_b + n_c
    k = k_b + k_c
    lo, hi = max(0, n_b - (n - k)), min(n_b, k)
    x = np.arange(lo, hi + 1)
    logpmf = (
        gammaln(k + 1) - gammaln(x + 1) - gammaln(k - x + 1)
        + gammaln(n - k + 1) - gammaln(n_b - x + 1) - gammaln(n - k - n_b + x + 1)
        - (gammaln(n + 1) - gammaln(n_b + 1) - gammaln(n - n_b + 1))
    )
    if alternative == "greater":
        sel = x >= k_b
    elif alternative == "less":
        sel = x <= k_b
    else:
        # scipy's rule: tables no more probable than the observed one (relative tolerance 1e-7)
        sel = logpmf <= logpmf[k_b - lo] + math.log1p(1e-7)
    return min(0.0, float(logsumexp(logpmf[sel])))


def fisher_exact_test(
    baseline_successes: int, baseline_n: int, candidate_successes: int, candidate_n: int,
    alternative: str = "greater",
) -> FisherResult:
    """Fisher's exact test for a difference in pass rates, p-value in log space.

    ``alternative="greater"`` (default) tests H1: p_b > p_c, i.e. a regression — the one-sided
    test of the AgentAssay paper's regression verdict. Equals
    ``scipy.stats.fisher_exact(table, alternative)`` where scipy's p-value does not underflow.
    """
    k_b, n_b, k_c, n_c = _check_two_arms(baseline_successes, baseline_n, candidate_successes, candidate_n)
    check_alternative(alternative, _ALTERNATIVES)
    log_p = _fisher_log_pvalue(k_b, n_b, k_c, n_c, alternative)
    a, b, c, d = k_b, n_b - k_b, k_c, n_c - k_c
    if k_b + k_c == 0 or b + d == 0:
        odds = math.nan  # a zero margin: no information about the odds ratio (as scipy)
    elif b * c == 0:
        odds = math.inf
    else:
        odds = a * d / (b * c)
    return FisherResult(odds, math.exp(log_p), log_p, neg_log10(log_p), alternative, ((a, b), (c, d)))


# --------------------------------------------------------------------------- z-test


@dataclass(frozen=True)
class ZTestResult:
    """Pooled two-proportion z-test; ``statistic`` = (p̂_b - p̂_c) / SE_pooled."""

    statistic: float
    pvalue: float
    log_pvalue: float
    neg_log10_pvalue: float
    alternative: str


def two_proportion_ztest(
    baseline_successes: int, baseline_n: int, candidate_successes: int, candidate_n: int,
    alternative: str = "greater",
) -> ZTestResult:
    """Two-proportion z-test with the pooled standard error (the AgentAssay paper's
    alternative to Fisher). ``"greater"`` tests H1: p_b > p_c. When both arms are all-pass or
    all-fail the pooled SE is 0; there is no evidence of a difference, so z = 0.
    """
    k_b, n_b, k_c, n_c = _check_two_arms(baseline_successes, baseline_n, candidate_successes, candidate_n)
    check_alternative(alternative, _ALTERNATIVES)
    pooled = (k_b + k_c) / (n_b + n_c)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n_b + 1.0 / n_c))
    z = 0.0 if se == 0.0 else (k_b / n_b - k_c / n_c) / se
    if alternative == "greater":
        log_p = float(log_ndtr(-z))
    elif alternative == "less":
        log_p = float(log_ndtr(z))
    else:
        log_p = min(0.0, math.log(2.0) + float(log_ndtr(-abs(z))))
    return ZTestResult(z, math.exp(log_p), log_p, neg_log10(log_p), alternative)


# --------------------------------------------------------------------------- effect sizes


@dataclass(frozen=True)
class EffectSizes:
    """How large a drop is, in the three measures the AgentAssay paper reports (a p-value
    alone says nothing about size), signed so that positive means the candidate is worse.

    ``cohens_h_magnitude`` uses the paper's bands: |h| < 0.2 small, < 0.5 medium, else large.
    ``odds_ratio`` is (odds_b / odds_c); with a zero cell, Haldane's correction adds 0.5 to
    every cell (``haldane_corrected``) so the ratio stays finite and defined.
    """

    difference: float
    cohens_h: float
    cohens_h_magnitude: str
    odds_ratio: float
    log_odds_ratio: float
    haldane_corrected: bool


def effect_sizes(
    baseline_successes: int, baseline_n: int, candidate_successes: int, candidate_n: int
) -> EffectSizes:
    """Absolute difference p̂_b - p̂_c, Cohen's h and the odds ratio."""
    k_b, n_b, k_c, n_c = _check_two_arms(baseline_successes, baseline_n, candidate_successes, candidate_n)
    p_b, p_c = k_b / n_b, k_c / n_c
    h = 2.0 * math.asin(math.sqrt(p_b)) - 2.0 * math.asin(math.sqrt(p_c))
    magnitude = "small" if abs(h) < 0.2 else "medium" if abs(h) < 0.5 else "large"
    cells = [k_b, n_b - k_b, k_c, n_c - k_c]
    corrected = min(cells) == 0
    a, b, c, d = (x + 0.5 for x in cells) if corrected else cells
    log_or = math.log(a) + math.log(d) - math.log(b) - math.log(c)
    return EffectSizes(p_b - p_c, h, magnitude, math.exp(log_or), log_or, corrected)


# --------------------------------------------------------------------------- Newcombe


@dataclass(frozen=True)
class DifferenceCI:
    """Confidence interval for p_b - p_c (positive = drop)."""

    estimate: float
    low: float
    high: float
    confidence_level: float
    alternative: str
    method: str


def newcombe_interval(
    baseline_successes: int, baseline_n: int, candidate_successes: int, candidate_n: int,
    alpha: float = 0.05, alternative: str = "two-sided", continuity_correction: bool = False,
) -> DifferenceCI:
    """Newcombe's hybrid score interval (1998, method 10; method 11 with ``continuity_correction``)
    for p_b - p_c.

    Combines the two Wilson intervals: L = d - sqrt((p̂_b - l_b)^2 + (u_c - p̂_c)^2),
    U = d + sqrt((u_b - p̂_b)^2 + (p̂_c - l_c)^2). Unlike the Wald interval it stays inside
    [-1, 1] and keeps close to nominal coverage at 0 or n successes. ``"less"`` gives the
    one-sided upper bound (low = -1) that the non-inferiority PASS rule uses, with Wilson
    bounds at z_{1-alpha}; ``"greater"`` the one-sided lower bound. ``continuity_correction=True`` builds
    it from continuity-corrected Wilson intervals, which :func:`regression_verdict` uses
    because the uncorrected bound misses its one-sided level by up to ~50 % (see there).
    """
    k_b, n_b, k_c, n_c = _check_two_arms(baseline_successes, baseline_n, candidate_successes, candidate_n)
    alpha = check_open_unit("alpha", alpha)
    check_alternative(alternative, ("two-sided", "less", "greater"))
    low, high = _newcombe_bounds(k_b, n_b, k_c, n_c, alpha, alternative, continuity_correction)
    return DifferenceCI(k_b / n_b - k_c / n_c, float(low), float(high), 1.0 - alpha, alternative,
                        "newcombe-hybrid-score-cc" if continuity_correction else "newcombe-hybrid-score")


def _newcombe_bounds(k_b, n_b, k_c, n_c, alpha, alternative, continuity_correction=False):
    """Vectorised Newcombe bounds for arrays of counts."""
    z = ndtri(1.0 - alpha / 2.0) if alternative == "two-sided" else ndtri(1.0 - alpha)
    p_b = np.asarray(k_b, dtype=float) / n_b
    p_c = np.asarray(k_c, dtype=float) / n_c
    l_b, u_b = wilson_bounds(k_b, n_b, z, continuity_correction)
    l_c, u_c = wilson_bounds(k_c, n_c, z, continuity_correction)
    d = p_b - p_c
    low = d - np.sqrt((p_b - l_b) ** 2 + (u_c - p_c) ** 2)
    high = d + np.sqrt((u_b - p_b) ** 2 + (p_c - l_c) ** 2)
    if alternative == "less":
        low = np.full_like(high, -1.0)
    elif alternative == "greater":
        high = np.full_like(low, 1.0)
    return low, high


# --------------------------------------------------------------------------- power, n*


def regression_power(baseline_rate: float, delta: float, baseline_n: int, candidate_n: int,
                     alpha: float = 0.05) -> float:
    """Prospective power to detect a drop of ``delta`` from ``baseline_rate``.

    The normal approximation behind the AgentAssay paper's regression power and sample
    size: with SE = sqrt(p_b q_b / n_b + p_c q_c / n_c) and p_c = p_b - delta,
    power = Phi(delta / SE - z_{1-alpha}). It inverts :func:`sample_size_regression`, so
    power at n* is >= 1 - beta.
    """
    baseline_rate = _check_rate("baseline_rate", baseline_rate)
    delta = check_open_unit("delta", delta)
    n_b = check_count("baseline_n", baseline_n, minimum=1)
    n_c = check_count("candidate_n", candidate_n, minimum=1)
    alpha = check_open_unit("alpha", alpha)
    p_c = _drop_rate(baseline_rate, delta)
    se = math.sqrt(baseline_rate * (1 - baseline_rate) / n_b + p_c * (1 - p_c) / n_c)
    return float(ndtr(delta / se - ndtri(1.0 - alpha)))


def sample_size_regression(baseline_rate: float, delta: float, alpha: float = 0.05, beta: float = 0.2) -> int:
    """Trials per arm to detect a drop of ``delta`` with power 1 - beta (the AgentAssay
    paper's sample size for the regression test).

    n* = ceil((z_{1-alpha} + z_{1-beta})^2 [p_b q_b + p_c q_c] / delta^2), one-sided quantile
    as the paper specifies for H1: p_c < p_b.
    """
    baseline_rate = _check_rate("baseline_rate", baseline_rate)
    delta = check_open_unit("delta", delta)
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    p_c = _drop_rate(baseline_rate, delta)
    z = ndtri(1.0 - alpha) + ndtri(1.0 - beta)
    var = baseline_rate * (1 - baseline_rate) + p_c * (1 - p_c)
    return max(1, int(math.ceil(z * z * var / (delta * delta) - 1e-9)))


def _check_rate(name, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return value


def _drop_rate(baseline_rate: float, delta: float) -> float:
    if baseline_rate - delta < 0.0:
        raise ValueError(f"a drop of delta={delta} from baseline_rate={baseline_rate} would be negative")
    return baseline_rate - delta


# --------------------------------------------------------------------------- verdict


@dataclass(frozen=True)
class RegressionResult:
    """Regression verdict for one scenario (the AgentAssay paper's regression verdict with a
    non-inferiority PASS rule; see :func:`regression_verdict`).

    ``pvalue`` is the one-sided Fisher p-value (H1: p_c < p_b); ``pvalue_adjusted`` the
    multiplicity-adjusted one the FAIL rule used (equal to ``pvalue`` for a single test).
    ``drop_upper`` is the one-sided 1 - alpha Newcombe (continuity-corrected) upper bound on
    p_b - p_c. ``power`` and
    ``n_star`` are prospective, at the observed baseline rate (None when a drop of delta is
    impossible, i.e. p̂_b < delta).
    """

    verdict: Verdict
    reason: str
    baseline_successes: int
    baseline_n: int
    candidate_successes: int
    candidate_n: int
    drop: float
    drop_upper: float
    pvalue: float
    pvalue_adjusted: float
    neg_log10_pvalue: float
    effects: EffectSizes
    power: float | None
    n_star: int | None
    delta: float
    alpha: float
    beta: float
    correction: str | None
    method: str = "fisher-exact + newcombe-cc non-inferiority"


def regression_verdict(
    baseline_successes: int, baseline_n: int, candidate_successes: int, candidate_n: int,
    delta: float, alpha: float = 0.05, beta: float = 0.2,
) -> RegressionResult:
    """Did the candidate's pass rate drop? PASS / FAIL / INCONCLUSIVE.

    - FAIL iff the one-sided Fisher exact p-value (H1: p_c < p_b) is < alpha **and** the
      observed drop p̂_b - p̂_c >= delta (statistical and practical significance: a drop
      too small to matter is not a regression, however many trials show it).
      P(FAIL | no change) <= alpha.
    - PASS iff the one-sided 1 - alpha Newcombe upper bound on p_b - p_c is < delta: a
      non-inferiority test, so P(PASS | true drop >= delta) <= alpha. The bound is built
      from continuity-corrected Wilson intervals (Newcombe's method 11): exact enumeration
      shows the uncorrected hybrid score bound PASSing a true drop of delta with probability
      up to 1.5 alpha at n = 10-50 per arm (still 1.1 alpha at n = 200), while the corrected
      one stays <= alpha (tests/stats check this exactly over a grid).
    - INCONCLUSIVE otherwise: too few trials to tell a drop of delta from none.

    This replaces the paper's "p >= alpha and power >= 1 - beta" PASS rule, which leaves an
    unchanged agent INCONCLUSIVE most of the time at any n (even at 10,000 trials per arm).
    ``beta`` only feeds the reported prospective ``power`` and ``n_star``.
    """
    return regression_verdicts([baseline_successes], [baseline_n], [candidate_successes], [candidate_n],
                               delta, alpha, beta, correction=None)[0]


def regression_verdicts(
    baseline_successes, baseline_n, candidate_successes, candidate_n,
    delta: float, alpha: float = 0.05, beta: float = 0.2, correction: str | None = "holm",
) -> list[RegressionResult]:
    """:func:`regression_verdict` for a suite of scenarios (array arguments, one entry per
    scenario), with the FAIL rule applied to multiplicity-adjusted Fisher p-values
    (``correction`` is a :func:`adjust_pvalues` method, or None for no adjustment).

    Only FAIL needs the correction: a suite PASS requires every scenario to PASS (an
    intersection-union test), whose level is already alpha.
    """
    delta = check_open_unit("delta", delta)
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    arms = [np.atleast_1d(np.asarray(a)) for a in (baseline_successes, baseline_n, candidate_successes, candidate_n)]
    if len({a.shape for a in arms}) != 1 or arms[0].ndim != 1 or arms[0].size == 0:
        raise ValueError("the four count arguments must be non-empty 1-d sequences of equal length")
    rows = [_check_two_arms(*(a[i].item() for a in arms)) for i in range(arms[0].size)]
    k_b, n_b, k_c, n_c = (np.array(col) for col in zip(*rows))

    log_p = np.array([_fisher_log_pvalue(*r, "greater") for r in rows])
    if correction is None:
        adjusted = np.exp(log_p)
    else:
        adjusted = adjust_pvalues(neg_log10_pvalues=-log_p / math.log(10.0), method=correction,
                                  alpha=alpha).adjusted
    _, upper = _newcombe_bounds(k_b, n_b, k_c, n_c, alpha, "less", continuity_correction=True)
    drop = k_b / n_b - k_c / n_c

    results = []
    for i, (kb, nb, kc, nc) in enumerate(rows):
        p_adj, d, up = float(adjusted[i]), float(drop[i]), float(upper[i])
        tag = "adjusted " if correction else ""
        if p_adj < alpha and d >= delta - 1e-12:
            v = Verdict.FAIL
            reason = f"{tag}Fisher p={p_adj:.3g} < alpha={alpha} and drop {d:.3f} >= delta={delta}"
        elif up < delta:
            v = Verdict.PASS
            reason = f"upper {1 - alpha:.0%} bound on the drop {up:.3f} < delta={delta} (non-inferior)"
        else:
            v = Verdict.INCONCLUSIVE
            if p_adj < alpha:
                reason = f"significant drop {d:.3f} but below delta={delta}; upper bound {up:.3f} >= delta"
            else:
                reason = f"{tag}Fisher p={p_adj:.3g} >= alpha and upper bound on the drop {up:.3f} >= delta={delta}"
        p_hat = kb / nb
        if p_hat >= delta:
            power = regression_power(p_hat, delta, nb, nc, alpha)
            n_star = sample_size_regression(p_hat, delta, alpha, beta)
        else:
            power = n_star = None
        results.append(RegressionResult(
            v, reason, kb, nb, kc, nc, d, up, float(math.exp(log_p[i])), p_adj, neg_log10(float(log_p[i])),
            effect_sizes(kb, nb, kc, nc), power, n_star, delta, alpha, beta, correction,
        ))
    return results


# --------------------------------------------------------------------------- McNemar


@dataclass(frozen=True)
class McNemarResult:
    """Exact McNemar test on the discordant pairs of a paired design.

    ``regressions`` = pairs where the baseline passed and the candidate failed,
    ``improvements`` = the reverse. ``statistic`` is ``regressions``.
    """

    statistic: int
    regressions: int
    improvements: int
    pvalue: float
    log_pvalue: float
    neg_log10_pvalue: float
    alternative: str


def mcnemar_exact(regressions: int, improvements: int, alternative: str = "greater") -> McNemarResult:
    """Exact (binomial) McNemar test for paired trials — baseline and candidate trials paired
    by (scenario, trial index).

    Under H0 each discordant pair is a regression with probability 1/2, so the count of
    regressions is Binomial(regressions + improvements, 1/2). ``"greater"`` (default) tests
    H1: the candidate regresses more often than it improves. The exact form is used at every
    size: the chi-squared version is unreliable below ~25 discordant pairs and the exact one
    costs nothing. Equals ``scipy.stats.binomtest(regressions, b + c, 0.5, alternative)``.
    """
    b = check_count("regressions", regressions)
    c = check_count("improvements", improvements)
    check_alternative(alternative, _ALTERNATIVES)
    m = b + c
    if m == 0:
        log_p = 0.0
    else:
        x = np.arange(m + 1)
        logpmf = gammaln(m + 1) - gammaln(x + 1) - gammaln(m - x + 1) - m * math.log(2.0)
        upper = float(logsumexp(logpmf[x >= b]))
        lower = float(logsumexp(logpmf[x <= b]))
        if alternative == "greater":
            log_p = upper
        elif alternative == "less":
            log_p = lower
        else:
            log_p = math.log(2.0) + min(upper, lower)
        log_p = min(0.0, log_p)
    return McNemarResult(b, b, c, math.exp(log_p), log_p, neg_log10(log_p), alternative)
