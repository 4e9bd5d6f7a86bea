import math

import numpy as np
import pytest

from otel_assay.stats import (
    SPRT,
    Verdict,
    beta_prior_llr,
    sprt_expected_n,
    sprt_operating_characteristics,
    sprt_test,
    verdict,
)
from tests.stats.bands import max_events


def test_boundaries_and_steps_match_definition_3_9():
    t = SPRT(0.9, 0.1, 0.05, 0.1)
    s = t.state
    assert s.lower == pytest.approx(math.log(0.1 / 0.95)) and s.upper == pytest.approx(math.log(0.9 / 0.05))
    assert t.update(True).llr == pytest.approx(math.log(0.8 / 0.9))
    assert t.update(0).llr == pytest.approx(math.log(0.8 / 0.9) + math.log(0.2 / 0.1))
    assert s.decision == "CONTINUE" and s.verdict == Verdict.INCONCLUSIVE


def test_blog_walkthrough_values():
    # The blog's p0 = 0.9, p1 = 0.8 example, in our sign convention (its LLR is our -LLR):
    t = SPRT(0.9, 0.1, 0.05, 0.2)
    states = [t.update(True) for _ in range(7)]
    assert -states[-1].llr == pytest.approx(0.824, abs=1e-3)
    good = sprt_test([1] * 20, 0.9, 0.1, 0.05, 0.2)
    assert good.decision == "PASS" and good.n == 14  # "Trial 14: pass -> ACCEPT"
    bad = sprt_test([1, 0, 0, 1, 0, 0, 0], 0.9, 0.1, 0.05, 0.2)
    # the blog sums rounded steps (-3.229); exactly it is -3.2302
    assert bad.decision == "FAIL" and bad.n == 7 and -bad.llr == pytest.approx(-3.2302, abs=1e-4)


def test_wald_expected_n_example_3_2():
    # Example 3.2: paper says ~52 under H0 and ~34 under H1; Wald's formulas (Eq. 9-10) give
    # 54.4 and 53.5, and the exact values (no overshoot approximation) are 56.9 and 59.3.
    assert sprt_expected_n(0.9, 0.1, 0.05, 0.1, p=0.9) == pytest.approx(54.35, abs=0.01)
    assert sprt_expected_n(0.9, 0.1, 0.05, 0.1, p=0.8) == pytest.approx(53.51, abs=0.01)
    h0 = sprt_operating_characteristics(0.9, 0.1, 0.05, 0.1, p=0.9)
    h1 = sprt_operating_characteristics(0.9, 0.1, 0.05, 0.1, p=0.8)
    assert h0.expected_n == pytest.approx(56.88, abs=0.01) and h1.expected_n == pytest.approx(59.26, abs=0.01)
    assert h0.prob_fail <= 0.05 and h1.prob_pass <= 0.1


def test_eq9_closed_form_and_zero_drift():
    th, de, a, b = 0.8, 0.15, 0.05, 0.2
    lo, hi = math.log(b / (1 - a)), math.log((1 - b) / a)
    kl = th * math.log(th / (th - de)) + (1 - th) * math.log((1 - th) / (1 - th + de))
    assert sprt_expected_n(th, de, a, b, p=th) == pytest.approx(-((1 - a) * lo + a * hi) / kl)
    # p where the drift vanishes: continuity of Wald's formula across it
    s, f = math.log((th - de) / th), math.log((1 - th + de) / (1 - th))
    p0 = f / (f - s)
    mid = sprt_expected_n(th, de, a, b, p=p0)
    assert sprt_expected_n(th, de, a, b, p=p0 + 1e-6) == pytest.approx(mid, rel=1e-3)


@pytest.mark.parametrize("theta,delta,alpha,beta", [(0.9, 0.1, 0.05, 0.1), (0.8, 0.15, 0.05, 0.2),
                                                    (0.5, 0.3, 0.01, 0.01)])
def test_wald_expected_n_is_smooth_at_every_distance_from_zero_drift(theta, delta, alpha, beta):
    # within ~1e-6 of the zero-drift rate the OC formula cancels catastrophically: p0 + 1e-8
    # gave E[N] = -3.5 (and p0 + 1e-11 gave -3518) where the answer is 79.7
    s, f = math.log((theta - delta) / theta), math.log((1 - theta + delta) / (1 - theta))
    p0 = f / (f - s)
    mid = sprt_expected_n(theta, delta, alpha, beta, p=p0)
    assert mid > 0
    for eps in np.r_[np.logspace(-14, -3, 45), -np.logspace(-14, -3, 45)]:
        got = sprt_expected_n(theta, delta, alpha, beta, p=p0 + eps)
        # E[N] is smooth in p: |dE/dp| / E is about 6 here, so a 1e-3 step moves it <= 1 %
        assert got == pytest.approx(mid, rel=20 * abs(eps) + 1e-9), eps


@pytest.mark.parametrize("theta,delta,alpha,beta", [(0.9, 0.1, 0.05, 0.1), (0.8, 0.1, 0.05, 0.2), (0.95, 0.05, 0.1, 0.1)])
def test_exact_error_rates_within_wald_bounds(theta, delta, alpha, beta):
    h0 = sprt_operating_characteristics(theta, delta, alpha, beta, p=theta)
    h1 = sprt_operating_characteristics(theta, delta, alpha, beta, p=theta - delta)
    # Wald: alpha' <= alpha / (1 - beta), beta' <= beta / (1 - alpha), alpha' + beta' <= alpha + beta
    assert h0.prob_fail <= alpha / (1 - beta) and h1.prob_pass <= beta / (1 - alpha)
    assert h0.prob_fail + h1.prob_pass <= alpha + beta
    assert h0.prob_inconclusive < 1e-11
    # Wald's ASN ignores overshoot: the exact mean is larger, by at most the per-step overshoot
    for res, p in ((h0, theta), (h1, theta - delta)):
        wald = sprt_expected_n(theta, delta, alpha, beta, p=p)
        assert wald <= res.expected_n <= wald * 1.25


def test_error_rates_and_mean_n_by_simulation():
    rng = np.random.default_rng(2024)
    theta, delta, alpha, beta = 0.9, 0.1, 0.05, 0.1
    reps = 3000
    for p, wrong, bound in ((0.9, "FAIL", alpha / (1 - beta)), (0.8, "PASS", beta / (1 - alpha))):
        decisions, lengths = [], []
        for _ in range(reps):
            s = sprt_test(rng.random(2000) < p, theta, delta, alpha, beta)
            decisions.append(s.decision)
            lengths.append(s.n)
        assert "CONTINUE" not in decisions
        assert decisions.count(wrong) <= max_events(reps, bound)
        exact = sprt_operating_characteristics(theta, delta, alpha, beta, p=p)
        sd = np.std(lengths) / math.sqrt(reps)
        assert abs(np.mean(lengths) - exact.expected_n) < 4.5 * sd
        assert abs(np.mean(lengths) / sprt_expected_n(theta, delta, alpha, beta, p=p) - 1) < 0.15


def test_truncation_gives_fixed_sample_verdict():
    t = SPRT(0.9, 0.1, 0.05, 0.1, n_max=5)
    for outcome in [1, 0, 1, 1, 1]:
        s = t.update(outcome)
    assert s.truncated and s.n == 5 and s.decision == verdict(4, 5, 0.9, 0.05).verdict
    with pytest.raises(ValueError, match="already decided"):
        t.update(1)
    oc = sprt_operating_characteristics(0.9, 0.1, 0.05, 0.1, p=0.9, n_max=50)
    assert oc.n_limit == 50 and oc.prob_pass + oc.prob_fail + oc.prob_inconclusive == pytest.approx(1.0)
    assert oc.prob_fail <= 0.05 + 0.025


def test_resume_is_exact():
    rng = np.random.default_rng(5)
    outcomes = list(rng.random(40) < 0.88)
    full = SPRT(0.9, 0.1, 0.05, 0.1)
    full.update_many(outcomes)
    resumed = SPRT.resume(outcomes[:17], 0.9, 0.1, 0.05, 0.1)
    resumed.update_many(outcomes[17:])
    assert resumed.state == full.state and np.array_equal(resumed.path, full.path)
    # a history that already crossed a boundary stays decided at the crossing point
    decided = SPRT.resume([0] * 10, 0.9, 0.1, 0.05, 0.1)
    assert decided.state.decision == "FAIL" and decided.state.n == 5


def test_beta_prior_warm_start_equals_llr_of_the_prior_counts():
    warm = SPRT.with_beta_prior(18, 20, 0.9, 0.1)
    assert warm.state.initial_llr == pytest.approx(18 * math.log(0.8 / 0.9) + 2 * math.log(0.2 / 0.1))
    assert beta_prior_llr(19, 3, 0.9, 0.1) == pytest.approx(warm.state.initial_llr)
    assert math.exp(abs(warm.state.initial_llr)) == pytest.approx(2.08, abs=0.01)  # the caveat's factor
    # a well-calibrated prior saves trials on average (Prop. 7.5(2)) ...
    cold = sprt_operating_characteristics(0.9, 0.1, 0.05, 0.1, p=0.95)
    hot = sprt_operating_characteristics(0.9, 0.1, 0.05, 0.1, p=0.95, initial_llr=beta_prior_llr(20, 1, 0.9, 0.1))
    assert hot.expected_n < cold.expected_n
    # ... and a prior from a better version inflates P(PASS) when the candidate regressed
    misled = sprt_operating_characteristics(0.9, 0.1, 0.05, 0.1, p=0.8, initial_llr=beta_prior_llr(20, 1, 0.9, 0.1))
    honest = sprt_operating_characteristics(0.9, 0.1, 0.05, 0.1, p=0.8)
    assert misled.prob_pass > honest.prob_pass


@pytest.mark.parametrize("call,name", [
    (lambda: SPRT(0.9, 0.95), "theta - delta"),
    (lambda: SPRT(1.0, 0.1), "theta"),
    (lambda: SPRT(0.9, 0.1, alpha=0.0), "alpha"),
    (lambda: SPRT(0.9, 0.1, beta=float("nan")), "beta"),
    (lambda: SPRT(0.9, 0.1, n_max=0), "n_max"),
    (lambda: SPRT(0.9, 0.1).update(2), "outcome"),
    (lambda: SPRT(0.9, 0.1).update("pass"), "outcome"),
    (lambda: SPRT.with_beta_prior(5, 4, 0.9, 0.1), "prior_successes"),
    (lambda: sprt_expected_n(0.9, 0.1, p=1.2), "p"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_bracketed_root_agrees_with_scipy_brentq():
    """The bisection that stands in for brentq (whose import costs 0.6 s of a gate run)."""
    from scipy.optimize import brentq

    from otel_assay.stats._common import bracketed_root

    cases = [(lambda x: x**3 - 2.0, 0.0, 3.0), (lambda x: math.exp(-x) - x, 0.0, 1.0),
             (lambda x: 0.3 * math.exp(2 * x) + 0.7 * math.exp(-x) - 1.0, 0.05, 1.0), (math.sin, 3.0, 4.0)]
    for f, lo, hi in cases:
        assert bracketed_root(f, lo, hi, xtol=1e-14, rtol=1e-14) == pytest.approx(
            brentq(f, lo, hi, xtol=1e-14, rtol=1e-14), rel=1e-12, abs=1e-13)
    assert bracketed_root(lambda x: x - 1.0, 1.0, 2.0, xtol=1e-12, rtol=0) == 1.0
    with pytest.raises(ValueError, match="same sign"):
        bracketed_root(lambda x: x * x + 1.0, -1.0, 1.0, xtol=1e-12, rtol=0)
