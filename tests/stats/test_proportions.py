import math

import numpy as np
import pytest
from scipy import stats

from otel_assay.stats import (
    Verdict,
    clopper_pearson_interval,
    sample_size_threshold,
    verdict,
    wilson_interval,
)
from otel_assay.stats.proportions import wilson_bounds
from tests.stats.bands import max_events


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.2])
def test_wilson_matches_scipy_on_grid(alternative, alpha):
    for n in [1, 2, 3, 7, 10, 31, 50, 100]:
        for k in range(n + 1):
            ref = stats.binomtest(k, n).proportion_ci(1 - alpha, "wilson") if alternative == "two-sided" else \
                stats.binomtest(k, n, alternative=alternative).proportion_ci(1 - alpha, "wilson")
            got = wilson_interval(k, n, alpha, alternative)
            assert got.low == pytest.approx(max(ref.low, 0.0), abs=1e-12)
            assert got.high == pytest.approx(min(ref.high, 1.0), abs=1e-12)
            refcc = stats.binomtest(k, n, alternative=alternative).proportion_ci(1 - alpha, "wilsoncc")
            gotcc = wilson_interval(k, n, alpha, alternative, continuity_correction=True)
            assert gotcc.low == pytest.approx(min(max(refcc.low, 0.0), 1.0), abs=1e-12)
            assert gotcc.high == pytest.approx(max(min(refcc.high, 1.0), 0.0), abs=1e-12)


def test_wilson_and_clopper_pearson_match_scipy_on_random_cases():
    rng = np.random.default_rng(1)
    for _ in range(120):
        n = int(rng.integers(1, 5000))
        k = int(rng.integers(0, n + 1))
        alpha = float(rng.uniform(0.001, 0.3))
        ref_w = stats.binomtest(k, n).proportion_ci(1 - alpha, "wilson")
        ref_e = stats.binomtest(k, n).proportion_ci(1 - alpha, "exact")
        w, e = wilson_interval(k, n, alpha), clopper_pearson_interval(k, n, alpha)
        assert (w.low, w.high) == pytest.approx((ref_w.low, ref_w.high), abs=1e-12)
        assert (e.low, e.high) == pytest.approx((ref_e.low, ref_e.high), abs=1e-9)


@pytest.mark.parametrize("alternative", ["less", "greater"])
def test_clopper_pearson_one_sided_matches_scipy(alternative):
    for n in [1, 5, 20, 77]:
        for k in range(n + 1):
            ref = stats.binomtest(k, n, alternative=alternative).proportion_ci(0.9, "exact")
            got = clopper_pearson_interval(k, n, 0.1, alternative)
            assert (got.low, got.high) == pytest.approx((ref.low, ref.high), abs=1e-9)


def test_paper_example_3_1():
    # 45/50: the paper prints [0.789, 0.958]; the Wilson interval is [0.786, 0.957]. Same verdict.
    r = verdict(45, 50, 0.85, 0.05)
    assert r.verdict == Verdict.INCONCLUSIVE == "INCONCLUSIVE"
    assert (r.ci.low, r.ci.high) == pytest.approx((0.7864, 0.9565), abs=1e-4)
    r = verdict(90, 100, 0.85, 0.05)
    assert r.verdict == Verdict.INCONCLUSIVE
    assert (r.ci.low, r.ci.high) == pytest.approx((0.826, 0.945), abs=1e-3)
    # 180/200: the paper prints [0.853, 0.935]; correct is [0.851, 0.934]. Still PASS.
    r = verdict(180, 200, 0.85, 0.05)
    assert r.verdict == Verdict.PASS
    assert (r.ci.low, r.ci.high) == pytest.approx((0.8506, 0.9343), abs=1e-4)


def test_verdict_fail_and_boundaries():
    assert verdict(30, 50, 0.85).verdict == Verdict.FAIL
    assert verdict(50, 50, 0.85).verdict == Verdict.PASS  # Wilson lower 0.929
    assert verdict(10, 10, 0.85).verdict == Verdict.INCONCLUSIVE  # lower 0.722 (blog's [0.72, 1])
    r = verdict(10, 10, 0.5, method="clopper-pearson")
    assert r.method == "clopper-pearson" and r.ci.low == pytest.approx(0.6915, abs=1e-4)


def _false_pass_exact(n, theta, alpha, method="wilson"):
    """sup_{p < theta} P(PASS) = P(PASS | p = theta), by monotonicity in p."""
    passing = [k for k in range(n + 1) if verdict(k, n, theta, alpha, method).verdict == Verdict.PASS]
    return 0.0 if not passing else float(stats.binom.sf(min(passing) - 1, n, theta))


def test_verdict_false_pass_rate_at_most_alpha_exact():
    # Exhaustive over the thresholds agents use: theta >= 0.6, alpha <= 0.05.
    z = {a: stats.norm.ppf(1 - a / 2) for a in (0.01, 0.05)}
    thetas = np.round(np.arange(0.60, 0.991, 0.01), 2)
    worst = 0.0
    for alpha in (0.01, 0.05):
        for n in range(1, 1001):
            low, _ = wilson_bounds(np.arange(n + 1), n, z[alpha])  # increasing in k
            first_pass = np.searchsorted(low, thetas, side="left")
            rate = np.where(first_pass <= n, stats.binom.sf(first_pass - 1, n, thetas), 0.0)
            worst = max(worst, float(rate.max()) / alpha)
    assert 0.9 < worst <= 1.0  # 0.933 alpha at n = 6, theta = 0.6
    # the public function agrees with the vectorised bounds used above
    assert _false_pass_exact(50, 0.8, 0.05) == pytest.approx(
        stats.binom.sf(np.flatnonzero(wilson_bounds(np.arange(51), 50, z[0.05])[0] >= 0.8)[0] - 1, 50, 0.8))


def _error_rates_at_threshold(n, theta, alpha, method="wilson"):
    """(P(FAIL | p = theta), P(PASS | p = theta)) by summing binomial probabilities, after
    checking that the FAIL counts are a lower and the PASS counts an upper set of k: then
    P(FAIL | p) falls and P(PASS | p) rises with p, so these are the worst cases over
    p >= theta (a false FAIL) and p < theta (a false PASS, as p -> theta)."""
    v = [verdict(k, n, theta, alpha, method).verdict for k in range(n + 1)]
    fail = np.array([x == Verdict.FAIL for x in v])
    ok = np.array([x == Verdict.PASS for x in v])
    assert not fail.any() or fail[: np.flatnonzero(fail)[-1] + 1].all()
    assert not ok.any() or ok[np.flatnonzero(ok)[0]:].all()
    pmf = stats.binom.pmf(np.arange(n + 1), n, theta)
    return float(pmf[fail].sum()), float(pmf[ok].sum())


@pytest.mark.parametrize("alpha,n_max", [(0.05, 300), (0.01, 100), (0.1, 100)])
def test_verdict_error_rates_at_most_alpha_exact_at_every_n(alpha, n_max):
    # Paper Thm 3.1 for the Wilson verdict at every n: P(FAIL | p >= theta) <= alpha and
    # P(PASS | p < theta) <= alpha. The bare Wilson rule broke both on few trials: 0/1 at
    # theta = 0.9 FAILed with probability 0.1, 4/4 at theta = 0.5 PASSed with 0.0625.
    worst_fail = worst_pass = 0.0
    for theta in (0.5, 0.8, 0.9, 0.95, 0.99, 0.1, 0.64):
        for n in range(1, n_max + 1):
            p_fail, p_pass = _error_rates_at_threshold(n, theta, alpha)
            assert p_fail <= alpha + 1e-12, (n, theta, p_fail)
            assert p_pass <= alpha + 1e-12, (n, theta, p_pass)
            worst_fail, worst_pass = max(worst_fail, p_fail), max(worst_pass, p_pass)
    # not bought by never deciding: the worst cases use most of alpha
    assert worst_fail > 0.9 * alpha and worst_pass > 0.9 * alpha


def test_verdict_small_samples_need_the_exact_test():
    assert verdict(0, 1, 0.9, 0.05).ci.high < 0.9  # Wilson alone: FAIL
    assert verdict(0, 1, 0.9, 0.05).verdict == Verdict.INCONCLUSIVE  # P(X <= 0 | 0.9) = 0.1 > alpha
    assert verdict(0, 2, 0.9, 0.05).verdict == Verdict.FAIL  # 0.01
    assert verdict(1, 1, 0.1, 0.05).ci.low >= 0.1 and verdict(1, 1, 0.1, 0.05).verdict == Verdict.INCONCLUSIVE
    assert verdict(4, 4, 0.5, 0.05).verdict == Verdict.INCONCLUSIVE  # 0.0625
    assert verdict(5, 5, 0.5, 0.05).verdict == Verdict.PASS  # 0.03125
    r = verdict(0, 1, 0.9, 0.05)
    assert r.pvalue_fail == pytest.approx(0.1) and "INCONCLUSIVE" == r.verdict


def test_verdict_is_wilsons_on_large_samples():
    # the exact test only binds on small samples: from there on the verdict is the interval's
    for theta, n_from in ((0.8, 19), (0.9, 36), (0.95, 97)):
        for n in range(n_from, n_from + 150):
            for k in range(n + 1):
                r = verdict(k, n, theta, 0.05)
                bare = (Verdict.PASS if r.ci.low >= theta else Verdict.FAIL if r.ci.high < theta
                        else Verdict.INCONCLUSIVE)
                assert r.verdict == bare, (k, n, theta)


def test_verdict_pvalues_match_scipy_and_the_verdict():
    from otel_assay.stats.proportions import exact_pvalues

    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 400))
        k = int(rng.integers(0, n + 1))
        theta = float(rng.uniform(0.02, 0.98))
        below, above = exact_pvalues(k, n, theta)
        assert below == pytest.approx(stats.binomtest(k, n, theta, alternative="less").pvalue, rel=1e-10)
        assert above == pytest.approx(stats.binomtest(k, n, theta, alternative="greater").pvalue, rel=1e-10)
        for alpha in (0.01, 0.05, 0.2):
            for method in ("wilson", "clopper-pearson"):
                r = verdict(k, n, theta, alpha, method)
                # FAIL (PASS) at alpha exactly when its p-value is below alpha: what the gate corrects
                if abs(r.pvalue_fail - alpha) > 1e-9:
                    assert (r.verdict == Verdict.FAIL) == (r.pvalue_fail < alpha), (k, n, theta, alpha, method)
                if abs(r.pvalue_pass - alpha) > 1e-9:
                    assert (r.verdict == Verdict.PASS) == (r.pvalue_pass < alpha), (k, n, theta, alpha, method)


def test_clopper_pearson_verdict_errors_at_most_half_alpha():
    for n in (1, 5, 20, 60):
        for theta in (0.1, 0.3, 0.64, 0.9):
            p_fail, p_pass = _error_rates_at_threshold(n, theta, 0.05, "clopper-pearson")
            assert p_fail <= 0.025 + 1e-12 and p_pass <= 0.025 + 1e-12


@pytest.mark.parametrize("n,theta", [(50, 0.85), (100, 0.9), (200, 0.8)])
def test_verdict_false_pass_rate_by_simulation(n, theta):
    rng = np.random.default_rng(n)
    reps = 200_000
    p = theta - 0.005
    table = np.array([verdict(k, n, theta).verdict == Verdict.PASS for k in range(n + 1)])
    k = rng.binomial(n, p, size=reps)
    false_pass = int(table[k].sum())
    assert false_pass <= max_events(reps, 0.05)
    assert max_events(reps, 0.05) / reps < 0.052  # a rate of 0.052 or more would be caught


def test_sample_size_threshold_eq1_example_3_2():
    # Paper Example 3.2 says n* ~ 109 "(Eq. (1))"; Eq. (1) gives 190.
    assert sample_size_threshold(0.9, 0.1, 0.05, 0.1) == 190
    z = stats.norm.ppf
    assert sample_size_threshold(0.7, 0.05, 0.05, 0.2) == math.ceil((z(0.975) + z(0.8)) ** 2 * 2 * 0.21 / 0.0025)


@pytest.mark.parametrize("call,name", [
    (lambda: verdict(1, 0, 0.5), "n"),
    (lambda: verdict(5, 4, 0.5), "successes"),
    (lambda: verdict(-1, 4, 0.5), "successes"),
    (lambda: verdict(1, 4, 0.5, alpha=0.0), "alpha"),
    (lambda: verdict(1, 4, 0.5, alpha=1.5), "alpha"),
    (lambda: verdict(1, 4, float("nan")), "threshold"),
    (lambda: verdict(1, 4, 0.5, alpha=float("nan")), "alpha"),
    (lambda: wilson_interval(1.5, 4), "successes"),
    (lambda: wilson_interval(float("nan"), 4), "successes"),
    (lambda: clopper_pearson_interval(1, 4, alternative="up"), "alternative"),
    (lambda: verdict(1, 4, 0.5, method="wald"), "method"),
    (lambda: sample_size_threshold(0.9, 0.0), "delta"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
