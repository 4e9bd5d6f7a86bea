"""Bayesian regression probability, as the AgentAssay paper defines it: the posterior
probability that the candidate's pass rate is more than delta below the baseline's."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.integrate import quad
from scipy.special import betainc, betaincinv, betaln

from ._common import Verdict, check_open_unit, check_positive, check_trials

_TAIL = 1e-15  # posterior mass left outside the integration range, per side


@dataclass(frozen=True)
class BayesResult:
    """P(p_c < p_b - delta | data) under independent Beta posteriors, and its verdict."""

    verdict: Verdict
    prob_regression: float
    error_bound: float
    posterior_baseline: tuple[float, float]
    posterior_candidate: tuple[float, float]
    prior: tuple[float, float]
    delta: float
    alpha: float
    beta: float
    method: str = "numerical-integration"


def bayes_regression(
    baseline_successes: int, baseline_n: int, candidate_successes: int, candidate_n: int,
    delta: float = 0.0, alpha: float = 0.05, beta: float = 0.2, prior: tuple[float, float] = (1.0, 1.0),
) -> BayesResult:
    """Bayesian regression probability P_reg = P[p_c < p_b - delta | r_b, r_c].

    Each pass rate gets the posterior Beta(a0 + k, b0 + n - k) from the common ``prior``
    Beta(a0, b0) (default uniform). Verdict as in the AgentAssay paper: FAIL if
    P_reg > 1 - alpha, PASS if P_reg < beta, INCONCLUSIVE otherwise.

    P_reg is a one-dimensional integral, computed by adaptive quadrature rather than sampling,
    so it is deterministic and accurate to ~1e-9 (``error_bound`` adds quadrature error and
    the 2e-15 of mass left outside the range). It integrates the narrower posterior's density
    against the wider one's CDF — P_reg = ∫ f_c(y) (1 - F_b(y + delta)) dy or
    ∫ f_b(x) F_c(x - delta) dx — so the integrand has no feature narrower than the density
    being integrated, even at 10^6 trials on one side and 10 on the other.
    """
    k_b, n_b = check_trials(baseline_successes, baseline_n, successes_name="baseline_successes", n_name="baseline_n")
    k_c, n_c = check_trials(candidate_successes, candidate_n, successes_name="candidate_successes", n_name="candidate_n")
    delta = check_positive("delta", delta, allow_zero=True)
    if delta >= 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    try:
        a0, b0 = (check_positive("prior", v) for v in prior)
    except TypeError:
        raise ValueError(f"prior must be a pair (a0, b0) of positive numbers, got {prior!r}") from None
    post_b = (a0 + k_b, b0 + n_b - k_b)
    post_c = (a0 + k_c, b0 + n_c - k_c)
    prob, err = _prob_less(post_b, post_c, delta)
    if prob > 1.0 - alpha:
        v = Verdict.FAIL
    elif prob < beta:
        v = Verdict.PASS
    else:
        v = Verdict.INCONCLUSIVE
    return BayesResult(v, prob, err, post_b, post_c, (a0, b0), delta, alpha, beta)


def _beta_var(a: float, b: float) -> float:
    return a * b / ((a + b) ** 2 * (a + b + 1.0))


def _logpdf(x: float, a: float, b: float) -> float:
    return (a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x) - betaln(a, b)


def _prob_less(post_b, post_c, delta):
    """P(p_c < p_b - delta) and an error bound."""
    (ab, bb), (ac, bc) = post_b, post_c
    if _beta_var(ac, bc) <= _beta_var(ab, bb):
        lo, hi = betaincinv(ac, bc, _TAIL), betaincinv(ac, bc, 1.0 - _TAIL)
        hi = min(hi, 1.0 - delta)  # beyond, 1 - F_b(y + delta) = 0

        def integrand(y):
            return math.exp(_logpdf(y, ac, bc)) * (1.0 - betainc(ab, bb, min(y + delta, 1.0)))

        mode_guess = ac / (ac + bc)
    else:
        lo, hi = betaincinv(ab, bb, _TAIL), betaincinv(ab, bb, 1.0 - _TAIL)
        lo = max(lo, delta)  # below, F_c(x - delta) = 0

        def integrand(x):
            return math.exp(_logpdf(x, ab, bb)) * betainc(ac, bc, max(x - delta, 0.0))

        mode_guess = ab / (ab + bb)
    if not lo < hi:
        return 0.0, 2 * _TAIL
    points = [mode_guess] if lo < mode_guess < hi else None
    value, err = quad(integrand, lo, hi, points=points, epsabs=1e-11, epsrel=1e-10, limit=200)
    return min(max(value, 0.0), 1.0), float(err) + 2 * _TAIL
