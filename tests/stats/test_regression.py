import math

import numpy as np
import pytest
from scipy import stats

from otel_assay.stats import (
    Verdict,
    effect_sizes,
    fisher_exact_test,
    mcnemar_exact,
    newcombe_interval,
    regression_power,
    regression_verdict,
    regression_verdicts,
    sample_size_regression,
    two_proportion_ztest,
)
from otel_assay.stats.regression import _newcombe_bounds
from tests.stats.bands import max_events


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_fisher_matches_scipy_on_grid_and_random(alternative):
    rng = np.random.default_rng(3)
    cases = [(kb, nb, kc, nc) for nb in (1, 2, 5, 12) for nc in (1, 3, 12) for kb in range(nb + 1)
             for kc in range(nc + 1)]
    for _ in range(200):
        nb, nc = (int(x) for x in rng.integers(1, 400, 2))
        cases.append((int(rng.integers(0, nb + 1)), nb, int(rng.integers(0, nc + 1)), nc))
    for kb, nb, kc, nc in cases:
        table = [[kb, nb - kb], [kc, nc - kc]]
        ref = stats.fisher_exact(table, alternative=alternative)
        got = fisher_exact_test(kb, nb, kc, nc, alternative)
        assert got.pvalue == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300), (kb, nb, kc, nc)
        if not math.isnan(ref.statistic):
            assert got.statistic == pytest.approx(ref.statistic)
        assert got.table == ((kb, nb - kb), (kc, nc - kc))


def test_fisher_pvalue_does_not_underflow():
    r = fisher_exact_test(3000, 3000, 0, 3000)
    assert r.pvalue == 0.0  # below the float range ...
    # ... but the log value is exact: p = 1 / C(6000, 3000)
    expected = (math.lgamma(3001) * 2 - math.lgamma(6001)) / math.log(10)
    assert r.neg_log10_pvalue == pytest.approx(-expected, rel=1e-10)
    assert r.neg_log10_pvalue > 1800


def test_ztest_matches_formula_and_logspace():
    r = two_proportion_ztest(45, 50, 35, 50)
    pooled = 80 / 100
    z = (0.9 - 0.7) / math.sqrt(pooled * (1 - pooled) * (2 / 50))
    assert r.statistic == pytest.approx(z)
    assert r.pvalue == pytest.approx(stats.norm.sf(z))
    assert two_proportion_ztest(45, 50, 35, 50, "two-sided").pvalue == pytest.approx(2 * stats.norm.sf(z))
    assert two_proportion_ztest(50, 50, 50, 50).statistic == 0.0
    big = two_proportion_ztest(100000, 100000, 0, 100000)
    assert big.pvalue == 0.0 and big.neg_log10_pvalue > 20000


def test_effect_sizes():
    e = effect_sizes(45, 50, 40, 50)
    assert e.difference == pytest.approx(0.1)
    assert e.cohens_h == pytest.approx(2 * math.asin(math.sqrt(0.9)) - 2 * math.asin(math.sqrt(0.8)))
    assert e.cohens_h_magnitude == "medium"  # 0.28: paper's bands
    assert e.odds_ratio == pytest.approx((45 / 5) / (40 / 10)) and not e.haldane_corrected
    z = effect_sizes(50, 50, 40, 50)
    assert z.haldane_corrected and z.odds_ratio == pytest.approx((50.5 * 10.5) / (0.5 * 40.5))
    assert effect_sizes(10, 50, 10, 50).cohens_h_magnitude == "small"


def test_newcombe_reproduces_published_values():
    # Newcombe (1998), Stat Med 17:873, Table II example 56/70 vs 48/80:
    # method 10 (hybrid score) 0.0524 to 0.3339, method 11 (with CC) 0.0428 to 0.3422.
    r = newcombe_interval(56, 70, 48, 80)
    assert (r.low, r.high) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    r = newcombe_interval(56, 70, 48, 80, continuity_correction=True)
    assert (r.low, r.high) == pytest.approx((0.0428, 0.3422), abs=1e-4)
    # 9/10 vs 3/10: 0.1705 to 0.8090 (method 10)
    r = newcombe_interval(9, 10, 3, 10)
    assert (r.low, r.high) == pytest.approx((0.1705, 0.8090), abs=1e-4)
    one = newcombe_interval(56, 70, 48, 80, alpha=0.05, alternative="less")
    two = newcombe_interval(56, 70, 48, 80, alpha=0.10)
    assert one.low == -1.0 and one.high == pytest.approx(two.high)


def test_regression_verdict_rules():
    same = regression_verdict(950, 1000, 950, 1000, delta=0.05)
    assert same.verdict == Verdict.PASS and same.drop_upper < 0.05
    drop = regression_verdict(90, 100, 60, 100, delta=0.1)
    assert drop.verdict == Verdict.FAIL and drop.pvalue < 1e-5 and drop.effects.difference == pytest.approx(0.3)
    small = regression_verdict(45, 50, 43, 50, delta=0.1)
    assert small.verdict == Verdict.INCONCLUSIVE
    # significant but practically negligible: FAIL needs the drop to reach delta
    tiny = regression_verdict(9500, 10000, 9400, 10000, delta=0.05)
    assert tiny.pvalue < 0.01 and tiny.verdict == Verdict.PASS
    assert small.power is not None and small.n_star == sample_size_regression(0.9, 0.1, 0.05, 0.2)
    assert regression_verdict(2, 50, 1, 50, delta=0.1).n_star is None  # p̂_b < delta
    assert "Fisher" in drop.reason


def test_regression_verdicts_apply_holm_to_fail_only():
    kb = [90, 90, 90, 45]
    kc = [70, 72, 90, 45]
    single = [regression_verdict(b, 100 if b == 90 else 50, c, 100 if b == 90 else 50, 0.1) for b, c in zip(kb, kc)]
    suite = regression_verdicts(kb, [100, 100, 100, 50], kc, [100, 100, 100, 50], delta=0.1)
    p = np.array([r.pvalue for r in single])
    order = np.argsort(p)
    holm = np.maximum.accumulate(np.minimum(1, p[order] * (4 - np.arange(4))))
    expected = np.empty(4)
    expected[order] = holm
    assert [r.pvalue_adjusted for r in suite] == pytest.approx(expected)
    assert [r.verdict for r in suite][2:] == [r.verdict for r in single][2:]


def _verdict_table(n, delta, alpha=0.05):
    kb, kc = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    results = regression_verdicts(kb.ravel(), np.full(kb.size, n), kc.ravel(), np.full(kb.size, n),
                                  delta=delta, alpha=alpha, correction=None)
    return np.array([r.verdict for r in results]).reshape(kb.shape)


def test_pass_rule_is_a_level_alpha_non_inferiority_test_exact():
    # Exact P(PASS | p_c = p_b - delta) over a grid, from the same bound regression_verdict uses.
    worst = 0.0
    for n in (10, 20, 50, 100, 200):
        kb, kc = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        _, upper = _newcombe_bounds(kb, n, kc, n, 0.05, "less", continuity_correction=True)
        for delta in (0.05, 0.1, 0.15, 0.2):
            passes = upper < delta
            for pb in np.arange(max(0.5, delta + 0.01), 1.0, 0.01):
                w = np.outer(stats.binom.pmf(np.arange(n + 1), n, pb), stats.binom.pmf(np.arange(n + 1), n, pb - delta))
                worst = max(worst, w[passes].sum() / 0.05)
    assert worst <= 1.0
    kb, kc = np.meshgrid(np.arange(21), np.arange(21), indexing="ij")
    # without the continuity correction the hybrid score bound is anti-conservative here
    _, upper = _newcombe_bounds(kb, 20, kc, 20, 0.05, "less")
    w = np.outer(stats.binom.pmf(np.arange(21), 20, 0.7), stats.binom.pmf(np.arange(21), 20, 0.55))
    assert w[upper < 0.15].sum() > 0.05
    # and the public verdict uses exactly the corrected bound
    _, upper_cc = _newcombe_bounds(kb, 20, kc, 20, 0.05, "less", continuity_correction=True)
    assert np.array_equal(_verdict_table(20, 0.15) == Verdict.PASS, upper_cc < 0.15)


def test_fail_rule_size_exact():
    # P(FAIL | p_b = p_c) <= alpha for every common rate: Fisher is exact-conditional.
    for n in (20, 50):
        fails = _verdict_table(n, 0.05) == Verdict.FAIL
        for p in np.arange(0.3, 1.0, 0.02):
            pmf = stats.binom.pmf(np.arange(n + 1), n, p)
            assert np.outer(pmf, pmf)[fails].sum() <= 0.05


def _simulated_verdicts(n, kb, kc, delta):
    """Verdicts for simulated count pairs, computing each distinct pair once."""
    pairs, inverse = np.unique(np.stack([kb, kc]), axis=1, return_inverse=True)
    results = regression_verdicts(pairs[0], np.full(pairs.shape[1], n), pairs[1], np.full(pairs.shape[1], n),
                                  delta=delta, correction=None)
    return np.array([r.verdict for r in results])[inverse.ravel()]


@pytest.mark.parametrize("n,pb,delta", [(50, 0.9, 0.1), (100, 0.8, 0.1), (200, 0.95, 0.05)])
def test_regression_error_rates_by_simulation(n, pb, delta):
    rng = np.random.default_rng(n)
    reps = 100_000
    kb = rng.binomial(n, pb, reps)
    same = _simulated_verdicts(n, kb, rng.binomial(n, pb, reps), delta)
    worse = _simulated_verdicts(n, kb, rng.binomial(n, pb - delta, reps), delta)
    assert np.count_nonzero(same == Verdict.FAIL) <= max_events(reps, 0.05)
    assert np.count_nonzero(worse == Verdict.PASS) <= max_events(reps, 0.05)
    assert max_events(reps, 0.05) / reps < 0.053  # a rate of 0.053 would be caught
    if n == 200:  # and the rule decides: at n = 200 an unchanged 95 % agent mostly PASSes
        assert np.count_nonzero(same == Verdict.PASS) > 0.5 * reps


def test_power_and_sample_size_eq6():
    # Example 3.2 numbers through Eq. (6): p_b = 0.9, p_c = 0.8, alpha = 0.05, beta = 0.1
    z = stats.norm.ppf
    assert sample_size_regression(0.9, 0.1, 0.05, 0.1) == math.ceil((z(0.95) + z(0.9)) ** 2 * 0.25 / 0.01) == 215
    n = sample_size_regression(0.9, 0.1, 0.05, 0.2)
    assert regression_power(0.9, 0.1, n, n, 0.05) >= 0.8 > regression_power(0.9, 0.1, n - 1, n - 1, 0.05)
    with pytest.raises(ValueError, match="negative"):
        sample_size_regression(0.05, 0.1)


def test_power_is_close_to_simulated_fisher_power():
    rng = np.random.default_rng(11)
    n = sample_size_regression(0.8, 0.15, 0.05, 0.2)
    reps = 4000
    kb, kc = rng.binomial(n, 0.8, reps), rng.binomial(n, 0.65, reps)
    rejected = sum(fisher_exact_test(int(b), n, int(c), n).pvalue < 0.05 for b, c in zip(kb, kc))
    # Fisher is conservative relative to the normal approximation: power a little below 0.8
    assert 0.70 < rejected / reps < 0.86


def test_mcnemar_exact():
    for b, c in [(0, 0), (3, 0), (7, 2), (15, 20), (40, 12)]:
        for alt in ("greater", "less", "two-sided"):
            ref = 1.0 if b + c == 0 else stats.binomtest(b, b + c, 0.5, alternative=alt).pvalue
            assert mcnemar_exact(b, c, alt).pvalue == pytest.approx(ref, rel=1e-10)
    # the blog's example: 3 discordant pairs out of 10, all one way -> p = 0.25 (two-sided)
    assert mcnemar_exact(3, 0, "two-sided").pvalue == pytest.approx(0.25)
    assert mcnemar_exact(5000, 0).neg_log10_pvalue == pytest.approx(5000 * math.log10(2))


@pytest.mark.parametrize("call,name", [
    (lambda: regression_verdict(5, 0, 1, 10, 0.1), "baseline_n"),
    (lambda: regression_verdict(5, 10, 11, 10, 0.1), "candidate_successes"),
    (lambda: regression_verdict(5, 10, 1, 10, 0.0), "delta"),
    (lambda: regression_verdict(5, 10, 1, 10, 0.1, alpha=1.0), "alpha"),
    (lambda: regression_verdict(5, 10, 1, 10, float("nan")), "delta"),
    (lambda: fisher_exact_test(1, 2, 1, 2, alternative="bigger"), "alternative"),
    (lambda: mcnemar_exact(-1, 2), "regressions"),
    (lambda: regression_verdicts([1, 2], [3], [1], [3], 0.1), "equal length"),
    (lambda: regression_verdicts([1], [3], [1], [3], 0.1, correction="fdr"), "method"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()
