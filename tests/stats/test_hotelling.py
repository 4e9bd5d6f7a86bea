import itertools
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import betainc

from otel_assay.stats import Verdict, hotelling_detectable_shift, hotelling_t2
from otel_assay.stats.hotelling import _log_betainc_series, _log_f_sf
from tests.stats.bands import max_events, min_events
from tests.stats.fingerprint_sim import FEATURES, simulate_fingerprints


def classical_t2(xb, xc):
    """Textbook two-sample Hotelling T² with the pooled covariance."""
    nb, nc = len(xb), len(xc)
    d = xb.mean(0) - xc.mean(0)
    s = ((nb - 1) * np.cov(xb, rowvar=False) + (nc - 1) * np.cov(xc, rowvar=False)) / (nb + nc - 2)
    return nb * nc / (nb + nc) * d @ np.linalg.solve(np.atleast_2d(s), d)


def pipeline_t2(xb, xc, share=0.95):
    """Direct implementation of DESIGN §6's steps: standardise on the combined sample, drop
    constant columns, PCA of the combined correlation, keep >= share of variance, T²."""
    x = np.vstack([xb, xc])
    keep = x.std(0, ddof=1) > 0
    z = (x[:, keep] - x[:, keep].mean(0)) / x[:, keep].std(0, ddof=1)
    val, vec = np.linalg.eigh(np.corrcoef(z, rowvar=False))
    val, vec = val[::-1], vec[:, ::-1]
    k = int(np.argmax(np.cumsum(val) / val.sum() >= share - 1e-12) + 1)
    y = z @ vec[:, :k]
    return classical_t2(y[: len(xb)], y[len(xb):]), k


def test_classical_t2_and_f_pvalue_match_numpy():
    rng = np.random.default_rng(0)
    for nb, nc, d in [(30, 40, 3), (60, 55, 8), (120, 80, 15), (12, 9, 2)]:
        cov = np.cov(rng.normal(size=(50, d)), rowvar=False) + np.eye(d)
        xb = rng.multivariate_normal(np.zeros(d), cov, size=nb)
        xc = rng.multivariate_normal(np.full(d, 0.3), cov, size=nc)
        r = hotelling_t2(xb, xc, method="F", shrinkage=0.0, variance_explained=1.0)
        t2 = classical_t2(xb, xc)
        n = nb + nc
        f = t2 * (n - d - 1) / ((n - 2) * d)
        assert r.statistic == pytest.approx(t2, rel=1e-9) and r.d_eff == d
        assert r.f_statistic == pytest.approx(f, rel=1e-9) and r.df == (d, n - d - 1)
        assert r.pvalue == pytest.approx(stats.f.sf(f, d, n - d - 1), rel=1e-9)


def test_projected_statistic_matches_direct_pipeline():
    rng = np.random.default_rng(1)
    for _ in range(10):
        xb = simulate_fingerprints(rng, 60)
        xc = simulate_fingerprints(rng, 70, 0.4)
        r = hotelling_t2(xb, xc, method="F", shrinkage=0.0)
        t2, k = pipeline_t2(xb, xc)
        assert r.d_eff == k and r.statistic == pytest.approx(t2, rel=1e-8)
        assert set(r.dropped_features) == {"feature_5", "feature_6"}  # depth and branches are constant


def test_exact_permutation_pvalue_matches_brute_force():
    rng = np.random.default_rng(2)
    xb, xc = rng.normal(size=(5, 2)), rng.normal(size=(4, 2)) + 0.8
    x = np.vstack([xb, xc])
    r = hotelling_t2(xb, xc, shrinkage=0.0, variance_explained=1.0)
    assert r.method == "exact-permutation" and r.n_permutations == math.comb(9, 5)
    t_obs = classical_t2(xb, xc)
    stats_all = [classical_t2(x[list(s)], x[[i for i in range(9) if i not in s]])
                 for s in itertools.combinations(range(9), 5)]
    assert r.pvalue == pytest.approx(np.mean(np.array(stats_all) >= t_obs * (1 - 1e-9)))


def test_random_permutation_pvalue_is_seeded_and_valid():
    rng = np.random.default_rng(3)
    xb, xc = simulate_fingerprints(rng, 20), simulate_fingerprints(rng, 20)
    a = hotelling_t2(xb, xc, seed=7)
    assert a == hotelling_t2(xb, xc, seed=7)
    assert a.method == "permutation" and a.n_permutations == 9999 and a.pvalue >= 1 / 10000
    b = hotelling_t2(xb, xc, seed=np.random.default_rng(7), n_permutations=999)
    assert abs(a.pvalue - b.pvalue) < 0.06
    # the permutation p-value agrees with brute-force Monte Carlo on the textbook statistic
    r = hotelling_t2(xb[:, :4], xc[:, :4], shrinkage=0.0, variance_explained=1.0, seed=1)
    x = np.vstack([xb[:, :4], xc[:, :4]])
    mc = np.random.default_rng(9)
    t_obs = classical_t2(xb[:, :4], xc[:, :4])
    hits = 0
    for _ in range(3000):
        perm = mc.permutation(40)
        hits += classical_t2(x[perm[:20]], x[perm[20:]]) >= t_obs
    assert r.pvalue == pytest.approx(hits / 3000, abs=0.03)


def test_log_f_sf_matches_scipy_and_does_not_underflow():
    for d1, d2 in [(1, 5), (3, 50), (10, 89), (30, 200)]:
        for x in [0.5, 2.0, 10.0, 100.0, 1e4, 1e6]:
            ref = stats.f.logsf(x, d1, d2)
            if ref > -600:
                assert _log_f_sf(x, d1, d2) == pytest.approx(ref, rel=1e-9)
    # the series used below the float range agrees with scipy where both are representable
    for a, b, w in [(100.0, 1.5, 1e-3), (25.0, 5.0, 0.05), (44.5, 5.0, 0.2), (2.5, 0.5, 1e-4)]:
        assert _log_betainc_series(a, b, w) == pytest.approx(math.log(betainc(a, b, w)), rel=1e-10)
    v = [_log_f_sf(x, 3, 200) for x in (1e3, 1e4, 1e5, 1e6)]
    assert all(np.isfinite(v)) and np.all(np.diff(v) < 0) and v[-1] < -900
    rng = np.random.default_rng(4)
    xb = rng.normal(size=(200, 3))
    r = hotelling_t2(xb, xb + [50.0, 0, 0] + rng.normal(scale=0.01, size=(200, 3)))
    assert r.pvalue == 0.0 and np.isfinite(r.neg_log10_pvalue) and r.neg_log10_pvalue > 300


def test_degenerate_inputs_never_crash():
    rng = np.random.default_rng(5)
    # identical constant samples
    r = hotelling_t2(np.ones((10, 4)), np.ones((10, 4)))
    assert r.verdict == Verdict.PASS and r.pvalue == 1.0 and "constant" in r.reason
    # identical non-constant samples: no evidence of a shift
    x = rng.normal(size=(15, 3))
    assert hotelling_t2(x, x.copy()).pvalue > 0.5
    # one trial per arm
    r = hotelling_t2(rng.normal(size=(1, 3)), rng.normal(size=(1, 3)))
    assert r.verdict == Verdict.INCONCLUSIVE and "too few" in r.reason
    # one trial against many still works
    assert hotelling_t2(rng.normal(size=(1, 3)) + 5, rng.normal(size=(30, 3))).pvalue <= 1 / 31 + 1e-12
    # more features than trials, duplicated (singular) columns
    xb = rng.normal(size=(6, 40))
    xc = rng.normal(size=(6, 40)) + 1.0
    r = hotelling_t2(np.hstack([xb, xb]), np.hstack([xc, xc]))
    assert r.shrinkage > 0 and 0 < r.pvalue < 0.05 and np.isfinite(r.statistic)
    # arms constant at different values: perfect separation
    r = hotelling_t2(np.zeros((10, 2)) + [0, 1], np.ones((10, 2)) + [0, 1])
    assert r.verdict == Verdict.FAIL and r.top_features[0].smd == math.inf
    r = hotelling_t2(np.c_[np.zeros(10), rng.normal(size=10)], np.c_[np.ones(10), rng.normal(size=10)])
    assert r.verdict == Verdict.FAIL


@pytest.mark.parametrize("bad,name", [
    (np.array([[1.0, np.nan], [2.0, 3.0]]), "baseline"), (np.array([[1.0, np.inf], [2.0, 3.0]]), "baseline"),
    (np.zeros((0, 2)), "baseline"), (np.zeros((2, 2, 2)), "baseline"), ([["a", "b"]], "baseline"),
])
def test_bad_input(bad, name):
    with pytest.raises(ValueError, match=name):
        hotelling_t2(bad, np.ones((3, 2)))


@pytest.mark.parametrize("kwargs,name", [
    (dict(alpha=0.0), "alpha"), (dict(method="exact"), "method"), (dict(n_permutations=0), "n_permutations"),
    (dict(variance_explained=0.0), "variance_explained"), (dict(shrinkage=2.0), "shrinkage"),
    (dict(seed=None), "seed"), (dict(feature_names=["a"]), "feature_names"),
])
def test_bad_options(kwargs, name):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=name):
        hotelling_t2(rng.normal(size=(5, 2)), rng.normal(size=(5, 2)), **kwargs)
    with pytest.raises(ValueError, match="features"):
        hotelling_t2(np.ones((3, 2)), np.ones((3, 3)))


@pytest.mark.parametrize("scale", [1e3, 1e160, 1e300])
def test_a_feature_on_any_scale_gives_the_same_test(scale):
    # T² is invariant to each feature's scale; squares of values beyond ~1e154 used to
    # overflow and crash the test with ZeroDivisionError (d_eff = 0)
    rng = np.random.default_rng(11)
    xb, xc = rng.normal(size=(20, 3)), rng.normal(size=(25, 3)) + [0.0, 1.5, 0.0]
    ref = hotelling_t2(xb, xc, seed=3)
    k = np.array([1.0, scale, 1.0])
    r = hotelling_t2(xb * k, xc * k, seed=3)
    assert r.d_eff == ref.d_eff == 3 and r.dropped_features == ()
    assert r.statistic == pytest.approx(ref.statistic, rel=1e-9) and r.pvalue == ref.pvalue
    assert r.verdict == ref.verdict == Verdict.FAIL
    top = {f.name: f for f in r.top_features}
    assert top["feature_1"].smd == pytest.approx({f.name: f for f in ref.top_features}["feature_1"].smd, rel=1e-9)
    assert top["feature_1"].candidate_mean == pytest.approx(xc[:, 1].mean() * scale, rel=1e-9)
    # constancy is still judged in the data's units: rounding-level spread around 0 is constant
    tiny = np.c_[rng.normal(size=(45, 1)), np.r_[np.zeros(44), 1e-16][:, None]]
    assert hotelling_t2(tiny[:20], tiny[20:]).dropped_features == ("feature_1",)


@pytest.mark.parametrize("b,alpha", [(19, 0.05), (99, 0.01), (9, 0.1)])
def test_too_few_random_permutations_for_alpha_is_inconclusive_not_pass(b, alpha):
    # (1 + hits) / (B + 1) >= 1 / (B + 1) >= alpha: no data could FAIL, so PASS ("no shift")
    # would be vacuous; a shift of 3 SD on 30 + 30 trials used to PASS
    rng = np.random.default_rng(5)
    xb, xc = rng.normal(size=(30, 2)), rng.normal(size=(30, 2)) + 3.0
    r = hotelling_t2(xb, xc, n_permutations=b, alpha=alpha)
    assert r.verdict == Verdict.INCONCLUSIVE and "permutations" in r.reason
    assert hotelling_t2(xb, xc, n_permutations=b + 1, alpha=alpha).verdict == Verdict.FAIL
    assert hotelling_t2(xb, xc, n_permutations=b, alpha=alpha, method="F").verdict == Verdict.FAIL


def test_top_features_name_the_moved_tool():
    rng = np.random.default_rng(6)
    r = hotelling_t2(simulate_fingerprints(rng, 200), simulate_fingerprints(rng, 200, 0.35), feature_names=FEATURES)
    assert r.verdict == Verdict.FAIL and r.top_features[0].name == "tool_frac_A" and r.top_features[0].smd < -0.5
    assert r.top_features[0].candidate_mean < r.top_features[0].baseline_mean


def test_detectable_shift_solves_noncentral_f_power():
    for nb, nc, d in [(10, 10, 3), (50, 50, 7), (200, 150, 12)]:
        shift = hotelling_detectable_shift(nb, nc, d, 0.05, 0.2)
        n = nb + nc
        crit = stats.f.isf(0.05, d, n - d - 1)
        # scipy's ncf.sf and the ncfdtr the solver uses agree to 1e-11 from scipy 1.15 on;
        # before, ncf.sf differs from ncfdtr by up to 6e-6. A noncentrality 0.1% off moves the
        # power by 4e-4, so 5e-5 still catches a wrong shift and allows the older ncf.sf
        assert stats.ncf.sf(crit, d, n - d - 1, nb * nc / n * shift**2) == pytest.approx(0.8, abs=5e-5)
    assert hotelling_detectable_shift(3, 2, 5) is None
    assert hotelling_detectable_shift(10, 10, 3) > hotelling_detectable_shift(100, 100, 3)


def test_detectable_shift_matches_simulated_power():
    rng = np.random.default_rng(7)
    d, n = 4, 40
    shift = hotelling_detectable_shift(n, n, d)
    reps = 1500
    hits = sum(hotelling_t2(rng.normal(size=(n, d)), rng.normal(size=(n, d)) + [shift, 0, 0, 0],
                            method="F", shrinkage=0.0, variance_explained=1.0).pvalue < 0.05 for _ in range(reps))
    assert min_events(reps, 0.8) <= hits <= max_events(reps, 0.8)


@pytest.mark.parametrize("n", [10, 20, 50])
def test_false_alarm_rate_on_fingerprint_like_data(n):
    # Skewed, discrete, collinear features; default method (permutation below 100 trials, F at 50+50).
    rng = np.random.default_rng(100 + n)
    reps = 1500
    alarms = sum(hotelling_t2(simulate_fingerprints(rng, n), simulate_fingerprints(rng, n),
                              n_permutations=999, seed=i).pvalue < 0.05 for i in range(reps))
    assert min_events(reps, 0.05) <= alarms <= max_events(reps, 0.05)


def test_power_at_50_trials_per_arm():
    # 8 tool calls per trial; the candidate picks tool A with probability 0.35 instead of 0.5.
    rng = np.random.default_rng(8)
    reps = 800
    hits = sum(hotelling_t2(simulate_fingerprints(rng, 50), simulate_fingerprints(rng, 50, 0.35)).pvalue < 0.05
               for _ in range(reps))
    # true power ~0.86, so P(estimate < 0.8) < 1e-6 (without the PCA step it would be ~0.78)
    assert hits / reps >= 0.8
