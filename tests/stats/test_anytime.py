"""The anytime-valid pass-rate tests: error rates held at every look, checked by simulation
with fixed seeds and bands a correct implementation misses with probability <= 1e-4, and the
vectorised bettor checked against a plain loop written from its definition."""

import math

import numpy as np
import pytest

from otel_assay.stats import Verdict
from otel_assay.stats.anytime import MAX_FRACTION, PRIOR_WEIGHT, plan_anytime_regression, anytime_rate, anytime_regression
from tests.stats.bands import max_events, min_events

REPS = 2000


def _wealth_by_loop(x, null, sign, floor, low, high):
    """The bettor's log wealth, trial by trial, from its definition."""
    prior_var = (high - low) ** 2 / (8.0 if low < 0 else 4.0)
    out, logw, seen = [], 0.0, []
    for xi in x:
        k = len(seen)
        mean = sum(seen) / (PRIOR_WEIGHT + k)
        centred = (sum(v * v for v in seen) - (sum(seen) ** 2) / max(k, 1)) / max(k, 1)
        var = (PRIOR_WEIGHT * prior_var + k * centred) / (PRIOR_WEIGHT + k)
        gain = max(floor, sign * (mean - null))
        worst = (null - low) if sign > 0 else (high - null)
        bet = min(gain / (max(var, 1e-12) + gain * gain), MAX_FRACTION / worst)
        logw += math.log1p(bet * sign * (xi - null))
        out.append(logw)
        seen.append(xi)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_the_vectorised_bettor_is_the_loop_of_its_definition(seed):
    from otel_assay.stats.anytime import _log_wealth

    rng = np.random.default_rng(seed)
    d = rng.choice([-1.0, 0.0, 1.0], size=120, p=[0.2, 0.5, 0.3])
    x = rng.random(90) < 0.7
    for arr, null, sign, low, high in [(d, 0.0, 1.0, -1.0, 1.0), (d, 0.1, -1.0, -1.0, 1.0),
                                       (x.astype(float), 0.6, 1.0, 0.0, 1.0), (x.astype(float), 0.6, -1.0, 0.0, 1.0)]:
        got = _log_wealth(arr[None, :], null, sign, 0.1, low, high)[0]
        assert got.shape == arr.shape
        np.testing.assert_allclose(got, _wealth_by_loop(arr.tolist(), null, sign, 0.1, low, high), rtol=1e-10, atol=1e-12)


def test_a_bet_does_not_see_its_own_trial():
    # wealth after trial n depends on trial n only through trial n's own factor: the bet was
    # fixed by trials 1..n-1, which is what keeps the wealth a supermartingale
    from otel_assay.stats.anytime import _log_wealth

    d = np.array([1.0, 0.0, -1.0, 1.0, 1.0, 0.0, 1.0])
    a = _log_wealth(d[None, :], 0.0, 1.0, 0.1, -1.0, 1.0)[0]
    for last in (-1.0, 0.0):
        e = d.copy()
        e[-1] = last
        b = _log_wealth(e[None, :], 0.0, 1.0, 0.1, -1.0, 1.0)[0]
        np.testing.assert_array_equal(a[:-1], b[:-1])
        # same bet: the last factors are 1 + l*1 and 1 + l*last
        bet = math.expm1(a[-1] - a[-2])
        assert math.isclose(b[-1] - b[-2], math.log1p(bet * last), abs_tol=1e-12)


@pytest.mark.parametrize("p", [0.5, 0.8, 0.95])
@pytest.mark.parametrize("correlation", [0.0, 0.6])
def test_errors_hold_at_every_look(p, correlation):
    # the worst case of any look schedule is looking after every pair, which is what the
    # first crossing over all prefixes is: 1, 3 or 10 looks can only err less often
    delta, alpha = 0.1, 0.05
    unchanged = plan_anytime_regression(p, 0.0, delta, alpha, n_max=300, correlation=correlation, reps=REPS, seed=11)
    assert unchanged.p_fail * REPS <= max_events(REPS, alpha), unchanged
    dropped = plan_anytime_regression(p, delta, delta, alpha, n_max=300, correlation=correlation, reps=REPS, seed=12)
    assert dropped.p_pass * REPS <= max_events(REPS, alpha), dropped


def test_errors_hold_for_the_threshold_test_at_every_look():
    rng = np.random.default_rng(5)
    reps, n, alpha = 300, 300, 0.05
    for theta in (0.6, 0.9):
        x = rng.random((reps, n)) < theta
        results = [anytime_rate(row, theta, 0.1, alpha) for row in x]
        assert sum(r.verdict == Verdict.PASS for r in results) <= max_events(reps, alpha)
        assert sum(r.verdict == Verdict.FAIL for r in results) <= max_events(reps, alpha)


def test_the_old_fixed_sample_test_inflated_with_looks_and_this_one_does_not():
    # the loop: gate at 20, 40, ..., 200 pairs, stop at the first FAIL. Fisher's test
    # read at every look FAILs an unchanged agent far above alpha; the e-process does not
    from otel_assay.stats import fisher_exact_test

    rng = np.random.default_rng(3)
    reps, looks, alpha = 300, range(20, 201, 20), 0.05
    fisher = anytime = 0
    for _ in range(reps):
        b, c = rng.random(200) < 0.8, rng.random(200) < 0.8
        fisher += any(fisher_exact_test(int(b[:n].sum()), n, int(c[:n].sum()), n).pvalue < alpha for n in looks)
        # a FAIL at a look is a first crossing at or before it: at the last look, all of them
        anytime += anytime_regression(b, c, 0.1, alpha).verdict == Verdict.FAIL
    assert fisher > max_events(reps, alpha)
    assert anytime <= max_events(reps, alpha)


def test_a_clear_drop_fails_and_no_change_passes_with_enough_trials():
    delta = 0.1
    big = plan_anytime_regression(0.8, 2 * delta, delta, n_max=600, reps=REPS, seed=4)
    assert big.p_fail * REPS >= min_events(REPS, 0.95)
    same = plan_anytime_regression(0.8, 0.0, delta, n_max=800, reps=REPS, seed=5)
    assert same.p_pass * REPS >= min_events(REPS, 0.9)
    # pairing that cancels shared difficulty decides sooner
    paired = plan_anytime_regression(0.8, 0.0, delta, n_max=800, correlation=0.6, reps=REPS, seed=5)
    assert paired.expected_n < 0.7 * same.expected_n


def test_bounds_agree_with_the_verdicts_and_cover_the_truth():
    rng = np.random.default_rng(8)
    covered, reps = 0, 200
    for _ in range(reps):
        b, c = rng.random(150) < 0.8, rng.random(150) < 0.75
        r = anytime_regression(b, c, 0.1)
        covered += r.lower <= 0.05
        if r.verdict == Verdict.PASS:
            assert r.upper <= 0.1
        if r.verdict == Verdict.FAIL:
            assert r.lower >= 0.0
        # the bounds hold at every prefix at once: one reached early can exclude the estimate
        # seen later (it then came from an early run of regressions)
        assert -1.0 <= r.lower <= r.upper <= 1.0
    assert covered >= min_events(reps, 0.95)


def test_result_fields():
    b = [True] * 60
    c = [True] * 30 + [False] * 30
    r = anytime_regression(b, c, 0.1)
    assert r.verdict == Verdict.FAIL and r.fail_at is not None and r.fail_at <= 30 + 15
    assert r.n == 60 and r.estimate == 0.5 and r.pvalue_fail == pytest.approx(1 / r.e_fail)
    assert r.e_fail >= 20 and r.pvalue_fail <= 0.05
    same = anytime_regression([True, False] * 200, [True, False] * 200, 0.1)
    assert same.verdict == Verdict.PASS and same.pass_at is not None and same.e_fail == 1.0


@pytest.mark.parametrize("bad, match", [
    (dict(baseline=[1, 0], candidate=[1]), "pair one to one"),
    (dict(baseline=[1, 2], candidate=[1, 0]), "outcomes"),
    (dict(baseline=[[1]], candidate=[[1]]), "1-d"),
])
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        anytime_regression(bad["baseline"], bad["candidate"], 0.1)
    with pytest.raises(ValueError, match="delta"):
        anytime_regression([1], [1], 1.5)
    with pytest.raises(ValueError, match="n_max"):
        plan_anytime_regression(0.8, 0.0, 0.1, n_max=0)
    with pytest.raises(ValueError, match="rate in"):
        plan_anytime_regression(0.05, 0.1, 0.1, n_max=10)


def test_empty_arms_are_inconclusive():
    r = anytime_regression([], [], 0.1)
    assert r.verdict == Verdict.INCONCLUSIVE and r.n == 0 and r.e_pass == r.e_fail == 1.0
