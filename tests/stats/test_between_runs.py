"""The between-run variance of a pass rate, checked against statsmodels' DerSimonian-Laird
estimator, and the anytime regression test with a run margin: its p-value valid at every
level, and nothing but the split of alpha changed when the margin is 0."""

import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from otel_assay.stats import Verdict, anytime_regression, between_run_variance, run_margin
from otel_assay.stats.anytime import RUN_SHARE
from tests.stats.bands import max_events

# statsmodels.stats.meta_analysis.combine_effects(x / n, p (1 - p) / n, method_re="dl") with
# p the pooled rate (statsmodels 0.14): its tau2 (negative where Q < k - 1: it does not
# truncate) and Q
REFERENCE = [
    (([160, 150, 170], [200, 200, 200]), 0.0017, 6.25),
    (([40, 55, 38, 61, 47], [60, 70, 50, 80, 65]), -0.0008486297531833566, 2.85558228305149),
    (([18, 19], [20, 20]), -0.002218750000000049, 0.360360360360346),
    (([90, 70, 95, 88, 60, 99, 80, 85, 91, 77], [100] * 10), 0.012872250000000064, 93.08655416439888),
]


@pytest.mark.parametrize("data, tau2, q", REFERENCE)
def test_the_estimate_is_dersimonian_laird_truncated_at_zero(data, tau2, q):
    r = between_run_variance(*data)
    assert r.k == len(data[0]) and r.rate == pytest.approx(sum(data[0]) / sum(data[1]))
    assert r.q == pytest.approx(q, rel=1e-9)
    assert r.tau2 == pytest.approx(max(tau2, 0.0), abs=1e-12) and r.tau == pytest.approx(math.sqrt(r.tau2))


def test_runs_alike_in_every_trial_do_not_vary():
    assert between_run_variance([20, 20, 20], [20, 20, 20]).tau == 0.0
    assert between_run_variance([0, 0], [5, 9]).tau == 0.0


def test_the_estimate_is_about_right_with_many_runs():
    rng = np.random.default_rng(0)
    rates = np.clip(0.7 + 0.08 * rng.standard_normal(400), 0, 1)
    n = np.full(400, 150)
    r = between_run_variance(rng.binomial(n, rates), n)
    assert r.tau == pytest.approx(0.08, abs=0.01)


def test_the_margin_is_a_t_quantile_of_the_drop_the_runs_give():
    m = run_margin(0.05, 4, 0.01)
    assert m == pytest.approx(student_t.ppf(0.99, 3) * 0.05 * math.sqrt(1 / 4 + 1))
    assert run_margin(0.05, 4, 0.01, k_candidate=4) < m
    assert run_margin(0.0, 3, 0.01) == 0.0
    assert between_run_variance([160, 150, 170], [200] * 3).margin(0.01) == pytest.approx(
        run_margin(math.sqrt(0.0017), 3, 0.01))


@pytest.mark.parametrize("args, match", [
    (([1], [2]), "at least 2 runs"),
    (([1, 3], [2, 2]), "passes <= trials"),
    (([1, 1], [0, 2]), "trials >= 1"),
    (([1.5, 1], [2, 2]), "whole counts"),
    (([1, 1], [2, 2, 2]), "one length"),
])
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        between_run_variance(*args)
    with pytest.raises(ValueError, match="k_baseline"):
        run_margin(0.1, 1, 0.01)
    with pytest.raises(ValueError, match="tau"):
        run_margin(-0.1, 3, 0.01)


def _margin(spread):
    return lambda level: student_t.ppf(1 - level, 4) * spread


def test_a_zero_margin_only_splits_alpha():
    rng = np.random.default_rng(3)
    b, c = rng.random(300) < 0.8, rng.random(300) < 0.6
    plain = anytime_regression(b, c, 0.1, bounds=False)
    split = anytime_regression(b, c, 0.1, bounds=False, run_margin=lambda level: 0.0)
    assert split.margin == 0.0 and split.e_fail == plain.e_fail and split.e_pass == plain.e_pass
    assert split.verdict == plain.verdict == Verdict.FAIL
    # the p-value is a grid level at which, and at every one above, the (1 - RUN_SHARE) test rejects
    assert plain.pvalue_fail <= split.pvalue_fail <= 1.1 * plain.pvalue_fail / (1 - RUN_SHARE)


def test_the_margin_widens_both_tests_and_the_bounds():
    rng = np.random.default_rng(4)
    b, c = rng.random(400) < 0.8, rng.random(400) < 0.7
    plain = anytime_regression(b, c, 0.1)
    wide = anytime_regression(b, c, 0.1, run_margin=_margin(0.03))
    assert wide.margin == pytest.approx(student_t.ppf(1 - RUN_SHARE * 0.05, 4) * 0.03)
    assert wide.e_fail < plain.e_fail and wide.pvalue_fail > plain.pvalue_fail
    assert wide.lower < plain.lower - 0.9 * wide.margin and wide.upper > plain.upper + 0.9 * wide.margin
    huge = anytime_regression(b, c, 0.1, run_margin=_margin(1.0))
    assert huge.verdict == Verdict.INCONCLUSIVE and huge.pvalue_fail == 1.0


@pytest.mark.parametrize("level", [0.01, 0.025, 0.05])
def test_the_p_value_with_a_margin_holds_its_level(level):
    # the run margin's share of every level is spent by shifting the drop: a drop exactly at
    # the margin of level RUN_SHARE * a, where the bettor alone errs at (1 - RUN_SHARE) a
    reps, rng = 1000, np.random.default_rng(5)
    spread = 0.02
    drop = _margin(spread)(RUN_SHARE * level)
    hits = 0
    for _ in range(reps):
        b = rng.random(200) < 0.8
        c = rng.random(200) < 0.8 - drop
        hits += anytime_regression(b, c, 0.1, bounds=False, run_margin=_margin(spread)).pvalue_fail <= level
    assert hits <= max_events(reps, (1 - RUN_SHARE) * level)
