import numpy as np
import pytest
from scipy.special import betaln

from otel_assay.stats import Verdict, bayes_regression


def _p_b_greater_closed_form(post_b, post_c):
    """P(p_b > p_c) for integer posterior parameters (Evan Miller's formula)."""
    (ab, bb), (ac, bc) = post_b, post_c
    i = np.arange(int(ab))
    return float(np.sum(np.exp(betaln(ac + i, bc + bb) - np.log(bb + i) - betaln(1 + i, bb) - betaln(ac, bc))))


def test_matches_closed_form_at_delta_zero():
    rng = np.random.default_rng(8)
    for _ in range(200):
        nb, nc = (int(x) for x in rng.integers(1, 400, 2))
        kb, kc = int(rng.integers(0, nb + 1)), int(rng.integers(0, nc + 1))
        r = bayes_regression(kb, nb, kc, nc, delta=0.0)
        assert r.prob_regression == pytest.approx(_p_b_greater_closed_form(r.posterior_baseline, r.posterior_candidate),
                                                  abs=1e-9)
        assert r.error_bound < 1e-6


def _reference(post_b, post_c, delta, m=400_001):
    """Independent check: Simpson's rule on a fine grid of the baseline density."""
    from scipy.stats import beta
    x = np.linspace(0, 1, m)
    f = beta.pdf(x, *post_b) * beta.cdf(np.clip(x - delta, 0, 1), *post_c)
    h = x[1] - x[0]
    return h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())


@pytest.mark.parametrize("counts,delta", [((45, 50, 40, 50), 0.05), ((900, 1000, 8, 10), 0.1),
                                          ((30, 40, 280, 400), 0.02), ((0, 10, 0, 10), 0.1)])
def test_matches_independent_quadrature_with_delta(counts, delta):
    r = bayes_regression(*counts, delta=delta)
    assert r.prob_regression == pytest.approx(_reference(r.posterior_baseline, r.posterior_candidate, delta), abs=1e-6)


def test_lopsided_sample_sizes_are_handled():
    # 10^6 candidate trials against 10 baseline ones: the integrand is a spike for one and flat
    # for the other; integrating the narrow density keeps it accurate.
    r = bayes_regression(9, 10, 700_000, 1_000_000, delta=0.1)
    ref = _reference(r.posterior_baseline, r.posterior_candidate, 0.1, m=2_000_001)
    assert r.prob_regression == pytest.approx(ref, abs=1e-6)
    mc = np.random.default_rng(0)
    a = mc.beta(*r.posterior_baseline, 2_000_000)
    c = mc.beta(*r.posterior_candidate, 2_000_000)
    assert r.prob_regression == pytest.approx(np.mean(c < a - 0.1), abs=2e-3)


def test_verdict_thresholds():
    assert bayes_regression(95, 100, 60, 100, delta=0.1).verdict == Verdict.FAIL
    assert bayes_regression(950, 1000, 950, 1000, delta=0.05).verdict == Verdict.PASS
    r = bayes_regression(9, 10, 8, 10, delta=0.05)
    assert r.verdict == Verdict.INCONCLUSIVE and r.beta <= r.prob_regression <= 1 - r.alpha
    jeffreys = bayes_regression(9, 10, 8, 10, prior=(0.5, 0.5))
    assert jeffreys.posterior_baseline == (9.5, 1.5)


def test_deterministic():
    assert bayes_regression(45, 50, 40, 50, 0.05) == bayes_regression(45, 50, 40, 50, 0.05)


@pytest.mark.parametrize("kwargs,name", [
    (dict(delta=-0.1), "delta"), (dict(delta=1.0), "delta"), (dict(alpha=0.0), "alpha"),
    (dict(prior=(0.0, 1.0)), "prior"), (dict(prior=(1.0, float("nan"))), "prior"), (dict(prior=1.0), "prior"),
])
def test_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        bayes_regression(5, 10, 4, 10, **kwargs)
    with pytest.raises(ValueError, match="candidate_n"):
        bayes_regression(5, 10, 4, 0)
