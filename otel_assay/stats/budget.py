"""How many trials to run, after the AgentAssay paper's token-efficient testing: adaptive
budgets (a stable agent needs fewer trials than a volatile one, so calibrate on a few trials
first), the fingerprint sample size, and multi-fidelity testing (spend part of the trials on
a cheap proxy model whose behaviour correlates with the target's)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr, ndtri

from ._common import check_count, check_finite_array, check_open_unit, check_positive, neg_log10

SIGMA_LOW2 = 0.05
SIGMA_HIGH2 = 0.25


def fingerprint_variance(fingerprints) -> float:
    """Total fingerprint variance: sum_i ||f_i - f̄||² / (k - 1), the trace of the
    covariance. Assumes features on a [0, 1] scale, as the paper's thresholds do."""
    f = check_finite_array("fingerprints", fingerprints, ndim=2)
    if f.shape[0] < 2:
        raise ValueError(f"fingerprints needs at least 2 calibration trials, got {f.shape[0]}")
    return float(np.sum((f - f.mean(axis=0)) ** 2) / (f.shape[0] - 1))


def variance_class(variance: float, sigma_low2: float = SIGMA_LOW2, sigma_high2: float = SIGMA_HIGH2) -> str:
    """Behavioural variance class: "stable" / "moderate" / "volatile".

    Defaults are the AgentAssay paper's definition (0.05, 0.25) for [0, 1]-scaled features;
    its footnote reports 1.5 / 5.0 in its own implementation, for unscaled 14-d fingerprints.
    """
    variance = check_positive("variance", variance, allow_zero=True)
    sigma_low2 = check_positive("sigma_low2", sigma_low2)
    sigma_high2 = check_positive("sigma_high2", sigma_high2)
    if sigma_low2 >= sigma_high2:
        raise ValueError(f"sigma_low2 must be < sigma_high2, got {sigma_low2} and {sigma_high2}")
    return "stable" if variance < sigma_low2 else "moderate" if variance < sigma_high2 else "volatile"


def adaptive_sample_size(variance: float, d_eff: int, alpha: float = 0.05, beta: float = 0.1,
                         min_shift: float = 0.5) -> int:
    """The AgentAssay paper's adaptive trial count:
    n* = ceil((z_{1-alpha} + z_{1-beta})² sigma² / Delta_min² + (d_eff + 1) / 2).

    The paper's stable-agent example (sigma² = 0.05, d_eff = 5, alpha = 0.05, beta = 0.1,
    Delta = 0.5) gives 5, as the paper says; :func:`adaptive_budget` adds the paper's floor
    and safety margin.
    """
    variance = check_positive("variance", variance, allow_zero=True)
    d_eff = check_count("d_eff", d_eff)
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    min_shift = check_positive("min_shift", min_shift)
    z = ndtri(1.0 - alpha) + ndtri(1.0 - beta)
    return int(math.ceil(z * z * variance / min_shift**2 + (d_eff + 1) / 2.0 - 1e-9))


@dataclass(frozen=True)
class BudgetResult:
    """Adaptive budget calibration's output: the recommended trials and how they were
    derived."""

    n_star: int
    n_formula: int
    variance: float
    variance_class: str
    d_eff: int
    calibration_trials: int
    safety_margin: float


def adaptive_budget(calibration, alpha: float = 0.05, beta: float = 0.1, min_shift: float = 0.5,
                    variance_explained: float = 0.95, sigma_low2: float = SIGMA_LOW2,
                    sigma_high2: float = SIGMA_HIGH2) -> BudgetResult:
    """Adaptive budget calibration (the AgentAssay paper's algorithm) from k calibration
    fingerprints (k x d).

    sigma² by :func:`fingerprint_variance`, d_eff by PCA of their covariance (components that
    explain ``variance_explained`` of it), n by :func:`adaptive_sample_size`, then
    n = max(n, k + 5) (a floor so the interval has enough trials to be reliable) and
    n = ceil(n (1 + sqrt(2/k))) for the error in a k-trial variance estimate. With k = 10 a
    stable agent lands at 22 — the paper's "15-25" follows from these two steps, not from the
    safety margin alone (5 x 1.45 would be 8).
    """
    f = check_finite_array("calibration", calibration, ndim=2)
    k = f.shape[0]
    variance = fingerprint_variance(f)
    if not (0.0 < float(variance_explained) <= 1.0):
        raise ValueError(f"variance_explained must be in (0, 1], got {variance_explained!r}")
    eig = np.sort(np.linalg.eigvalsh(np.cov(f, rowvar=False).reshape(f.shape[1], f.shape[1])))[::-1]
    eig = np.clip(eig, 0.0, None)
    if eig.sum() > 0.0:
        d_eff = int(np.searchsorted(np.cumsum(eig) / eig.sum(), float(variance_explained) - 1e-12) + 1)
    else:
        d_eff = 0
    n_formula = adaptive_sample_size(variance, d_eff, alpha, beta, min_shift)
    margin = 1.0 + math.sqrt(2.0 / k)
    n_star = int(math.ceil(max(n_formula, k + 5) * margin - 1e-9))
    return BudgetResult(n_star, n_formula, variance, variance_class(variance, sigma_low2, sigma_high2),
                        d_eff, k, margin)


def fingerprint_sample_size(d_eff: int, min_shift: float, alpha: float = 0.05, beta: float = 0.1) -> int:
    """Trials for the fingerprint T² test to detect a Mahalanobis shift (the AgentAssay
    paper's planning formula):
    ceil((d_eff + 1)(z_{1-alpha} + z_{1-beta})² / Delta² + (d_eff + 1) / 2).

    A planning approximation; :func:`otel_assay.stats.hotelling_detectable_shift` gives the
    exact noncentral-F answer for given sample sizes.
    """
    d_eff = check_count("d_eff", d_eff, minimum=1)
    min_shift = check_positive("min_shift", min_shift)
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    z = ndtri(1.0 - alpha) + ndtri(1.0 - beta)
    return int(math.ceil((d_eff + 1) * z * z / min_shift**2 + (d_eff + 1) / 2.0 - 1e-9))


# --------------------------------------------------------------------------- multi-fidelity


@dataclass(frozen=True)
class CombinedPValue:
    """Weighted Stouffer combination: Z = sum w_i z_i / sqrt(sum w_i²), z_i = Phi^{-1}(1 - p_i)."""

    statistic: float
    pvalue: float
    neg_log10_pvalue: float
    weights: tuple[float, ...]
    method: str = "weighted-stouffer"


def stouffer_combine(pvalues, weights=None) -> CombinedPValue:
    """Combine independent one-sided p-values by the weighted Stouffer method. Valid for any
    fixed weights; the p-value is computed in log space."""
    p = check_finite_array("pvalues", pvalues, ndim=1)
    if p.size == 0 or np.any((p <= 0.0) | (p >= 1.0)):
        raise ValueError("pvalues must be a non-empty sequence of numbers in (0, 1)")
    w = np.ones_like(p) if weights is None else check_finite_array("weights", weights, ndim=1)
    if w.shape != p.shape or np.any(w < 0.0) or not np.any(w > 0.0):
        raise ValueError("weights must be non-negative, not all zero, one per p-value")
    z = -ndtri(p)
    stat = float(w @ z / math.sqrt(float(w @ w)))
    log_p = float(log_ndtr(-stat))
    return CombinedPValue(stat, math.exp(log_p), neg_log10(log_p), tuple(float(x) for x in w))


def multi_fidelity_combine(p_proxy: float, p_target: float, rho: float) -> CombinedPValue:
    """Evidence from a cheap proxy model and the target model (the AgentAssay paper's
    multi-fidelity combination).

    The paper weights the proxy by rho and the target by 1 - rho (rho = fingerprint correlation
    between the two models) and, like its implementation, this combines by weighted Stouffer
    rather than the paper's weighted Fisher statistic (whose chi²_4 reference is not exact
    with unequal weights). The two tests must be on independent trials.
    """
    rho = float(rho)
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho!r}")
    return stouffer_combine([p_proxy, p_target], [rho, 1.0 - rho])


@dataclass(frozen=True)
class MultiFidelityPlan:
    """Trials on the target and the proxy model, and cost relative to target-only testing.

    ``paper_bound`` is the AgentAssay paper's cost bound 1 - rho² + rho² c_c/c_e, which no
    allocation attains.
    """

    n_target: int
    n_proxy: int
    cost_ratio: float
    proxy_per_target: float
    paper_bound: float


def multi_fidelity_allocation(n_single: int, rho: float, cost_ratio: float) -> MultiFidelityPlan:
    """Optimal split between target and proxy trials: the cheapest allocation with the power
    of ``n_single`` target-only trials.

    Uses the two-model multi-fidelity Monte Carlo result the paper's proof cites (Peherstorfer,
    Willcox & Gunzburger 2016): with n_e target trials and r n_e proxy trials, the
    control-variate estimate has the variance of n_single target trials when
    n_e = n_single (1 - rho² + rho²/r); cost is minimised at r* = sqrt(rho² / (w (1 - rho²))),
    w = c_c / c_e, giving cost ratio (sqrt(1 - rho²) + rho sqrt(w))². When r* <= 1 the proxy
    does not pay and the plan is target-only.

    The paper's cost bound drops the cross term 2 rho sqrt(w (1 - rho²)): for rho = 0.8,
    w = 0.1 the attainable ratio is 0.728, not 0.424; for rho = 0.9 it is 0.519, not 0.271.
    """
    n_single = check_count("n_single", n_single, minimum=1)
    rho = float(rho)
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"rho must be in [0, 1), got {rho!r}")
    w = check_open_unit("cost_ratio", cost_ratio)
    paper = 1.0 - rho * rho + rho * rho * w
    r = math.sqrt(rho * rho / (w * (1.0 - rho * rho))) if rho > 0.0 else 0.0
    if r <= 1.0:
        return MultiFidelityPlan(n_single, 0, 1.0, 0.0, paper)
    n_e = int(math.ceil(n_single * (1.0 - rho * rho + rho * rho / r) - 1e-9))
    n_c = int(math.ceil(r * n_e - 1e-9))
    return MultiFidelityPlan(n_e, n_c, (n_e + n_c * w) / n_single, r, paper)
