import math

import numpy as np
import pytest
from scipy import stats

from otel_assay.stats import (
    adaptive_budget,
    adaptive_sample_size,
    fingerprint_sample_size,
    fingerprint_variance,
    multi_fidelity_allocation,
    multi_fidelity_combine,
    stouffer_combine,
    variance_class,
)


def test_eq40_and_algorithm_4():
    # Eq. (40): ceil(1.71 + 3) = 5, as the paper says
    assert adaptive_sample_size(0.05, 5, 0.05, 0.1, 0.5) == 5
    # Alg. 4 with k = 10 stable calibration trials: max(5, 15) * (1 + sqrt(0.2)) -> 22, inside the
    # paper's "15-25"; the safety margin alone would give 8.
    rng = np.random.default_rng(0)
    calib = 0.5 + rng.normal(scale=0.05, size=(10, 14))
    b = adaptive_budget(calib)
    assert b.variance_class == "stable" and b.calibration_trials == 10
    assert b.n_star == math.ceil(max(b.n_formula, 15) * (1 + math.sqrt(0.2))) == 22
    assert b.variance == pytest.approx(fingerprint_variance(calib))
    assert b.variance == pytest.approx(np.trace(np.cov(calib, rowvar=False)))


def test_variance_class():
    assert variance_class(0.01) == "stable" and variance_class(0.1) == "moderate" and variance_class(0.3) == "volatile"
    assert variance_class(2.0, 1.5, 5.0) == "moderate"  # the paper implementation's thresholds
    with pytest.raises(ValueError, match="sigma_low2"):
        variance_class(0.1, 0.3, 0.2)


def test_fingerprint_sample_size_eq30():
    z = stats.norm.ppf(0.95) + stats.norm.ppf(0.9)
    assert fingerprint_sample_size(5, 0.5) == math.ceil(6 * z * z / 0.25 + 3)


def test_stouffer_and_multi_fidelity_combination():
    r = stouffer_combine([0.01, 0.2], [2.0, 1.0])
    z = (2 * stats.norm.isf(0.01) + stats.norm.isf(0.2)) / math.sqrt(5)
    assert r.statistic == pytest.approx(z) and r.pvalue == pytest.approx(stats.norm.sf(z))
    assert stouffer_combine([1e-300, 1e-300]).neg_log10_pvalue > 300
    mf = multi_fidelity_combine(0.01, 0.3, 0.8)
    assert mf.weights == pytest.approx((0.8, 0.2))
    # valid: uniform p-values under H0 give a uniform combined p-value
    rng = np.random.default_rng(1)
    ps = [multi_fidelity_combine(a, b, 0.7).pvalue for a, b in rng.uniform(size=(4000, 2))]
    assert abs(np.mean(np.array(ps) < 0.05) - 0.05) < 0.015


def test_multi_fidelity_allocation_corrects_eq48():
    # Paper: cost ratio <= 0.424 at rho = 0.8, c_c/c_e = 0.1; the two-model optimum is 0.728.
    plan = multi_fidelity_allocation(1000, 0.8, 0.1)
    assert plan.paper_bound == pytest.approx(0.424)
    assert plan.cost_ratio == pytest.approx((0.6 + 0.8 * math.sqrt(0.1)) ** 2, abs=2e-3)
    assert multi_fidelity_allocation(1000, 0.9, 0.1).cost_ratio == pytest.approx(0.519, abs=2e-3)
    # the allocation achieves the variance of n_single target trials
    r = plan.n_proxy / plan.n_target
    assert 1 / plan.n_target * (1 - (1 - 1 / r) * 0.64) <= 1 / 1000 * (1 + 1e-9)
    # a weak proxy does not pay
    assert multi_fidelity_allocation(100, 0.2, 0.5) .n_proxy == 0


@pytest.mark.parametrize("call,name", [
    (lambda: adaptive_budget(np.ones((1, 3))), "calibration"),
    (lambda: adaptive_budget([[1.0, np.nan], [1.0, 2.0]]), "calibration"),
    (lambda: adaptive_sample_size(0.1, 3, min_shift=0.0), "min_shift"),
    (lambda: stouffer_combine([0.0, 0.5]), "pvalues"),
    (lambda: multi_fidelity_allocation(10, 1.0, 0.1), "rho"),
    (lambda: multi_fidelity_allocation(10, 0.5, 0.0), "cost_ratio"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()
