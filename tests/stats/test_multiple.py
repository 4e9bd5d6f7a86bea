import numpy as np
import pytest
from scipy import stats

from otel_assay.stats import Verdict, adjust_pvalues, suite_verdict


@pytest.mark.parametrize("method", ["bh", "by"])
def test_fdr_matches_scipy(method):
    rng = np.random.default_rng(4)
    for m in (1, 2, 5, 50, 300):
        p = np.concatenate([rng.uniform(size=m // 2), rng.uniform(0, 1e-3, size=m - m // 2)])
        rng.shuffle(p)
        got = adjust_pvalues(p, method, 0.05)
        ref = stats.false_discovery_control(p, method=method)
        assert got.adjusted == pytest.approx(ref, rel=1e-12)
        assert np.array_equal(got.rejected, ref <= 0.05) and got.controls == "FDR"


def _holm_reference(p, alpha):
    order = np.argsort(p)
    m = len(p)
    rejected = np.zeros(m, bool)
    for j, i in enumerate(order):  # Remark 3.2: reject H_(j) while p_(j) <= alpha / (m - j + 1)
        if p[i] > alpha / (m - j):
            break
        rejected[i] = True
    return rejected


def test_holm_and_bonferroni():
    rng = np.random.default_rng(9)
    for _ in range(200):
        m = int(rng.integers(1, 30))
        p = rng.uniform(0, 0.1, size=m) ** 2
        holm = adjust_pvalues(p, "holm", 0.05)
        assert np.array_equal(holm.rejected, _holm_reference(p, 0.05)) and holm.controls == "FWER"
        bonf = adjust_pvalues(p, "bonferroni", 0.05)
        assert bonf.adjusted == pytest.approx(np.minimum(1, p * m))
        assert np.all(holm.adjusted <= bonf.adjusted + 1e-15)
    assert adjust_pvalues([0.01, 0.04, 0.03], "holm").adjusted == pytest.approx([0.03, 0.06, 0.06])


def test_log_space_input_keeps_tiny_pvalues_apart():
    r = adjust_pvalues(neg_log10_pvalues=[400.0, 300.0, 1.0], method="holm")
    assert r.neg_log10_adjusted == pytest.approx([400 - np.log10(3), 300 - np.log10(2), 1.0])
    assert r.adjusted[0] == 0.0 and r.rejected.tolist() == [True, True, False]
    # same answer from ordinary p-values where they are representable
    a = adjust_pvalues([1e-30, 2e-5, 0.2], "by")
    b = adjust_pvalues(neg_log10_pvalues=-np.log10([1e-30, 2e-5, 0.2]), method="by")
    assert a.adjusted == pytest.approx(b.adjusted, rel=1e-12)


def test_suite_verdict_definition_3_11():
    assert suite_verdict(["PASS", "PASS"]).verdict == Verdict.PASS
    assert suite_verdict(["PASS", "INCONCLUSIVE", "PASS"]).verdict == Verdict.INCONCLUSIVE
    r = suite_verdict([Verdict.PASS, "INCONCLUSIVE", "FAIL"])
    assert r.verdict == Verdict.FAIL and (r.n_pass, r.n_fail, r.n_inconclusive) == (1, 1, 1)


@pytest.mark.parametrize("call,name", [
    (lambda: adjust_pvalues([0.1, float("nan")]), "pvalues"),
    (lambda: adjust_pvalues([0.1, 1.2]), "pvalues"),
    (lambda: adjust_pvalues([]), "pvalues"),
    (lambda: adjust_pvalues([0.1], alpha=0), "alpha"),
    (lambda: adjust_pvalues([0.1], method="fdr"), "method"),
    (lambda: adjust_pvalues([0.1], neg_log10_pvalues=[1.0]), "exactly one"),
    (lambda: adjust_pvalues(neg_log10_pvalues=[-1.0]), "neg_log10_pvalues"),
    (lambda: suite_verdict([]), "verdicts"),
    (lambda: suite_verdict(["PASS", "MAYBE"]), "verdict"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()
