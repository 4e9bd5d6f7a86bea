"""Multiple-testing corrections and the suite verdict: a suite of m scenarios each tested at
alpha FAILs a healthy agent far more often than alpha unless the p-values are corrected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ._common import LN10, Verdict, check_open_unit

METHODS = ("holm", "bonferroni", "bh", "by")


@dataclass(frozen=True)
class AdjustedPValues:
    """Adjusted p-values in the input order, and which hypotheses are rejected at ``alpha``.

    ``neg_log10_adjusted`` carries the adjusted values without underflow, so a p-value of
    1e-400 (given through ``neg_log10_pvalues``) stays distinguishable from 1e-300.
    """

    adjusted: np.ndarray
    neg_log10_adjusted: np.ndarray
    rejected: np.ndarray
    method: str
    alpha: float
    controls: str  # "FWER" or "FDR"


def adjust_pvalues(
    pvalues=None, method: str = "holm", alpha: float = 0.05, *, neg_log10_pvalues=None
) -> AdjustedPValues:
    """Adjust a family of p-values for multiple testing.

    Methods: ``"holm"`` (default, as the AgentAssay paper recommends; step-down, controls the
    family-wise error rate under any dependence), ``"bonferroni"`` (FWER, single step), ``"bh"``
    (Benjamini-Hochberg, false discovery rate under independence or positive dependence) and
    ``"by"`` (Benjamini-Yekutieli, FDR under arbitrary dependence). A hypothesis is rejected
    when its adjusted p-value is <= alpha, which reproduces each procedure's rejection rule.

    Give either ``pvalues`` or ``neg_log10_pvalues`` (for p-values too small for a float).
    The arithmetic runs on log p, so adjustment never underflows. BH/BY equal
    ``scipy.stats.false_discovery_control``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    alpha = check_open_unit("alpha", alpha)
    if (pvalues is None) == (neg_log10_pvalues is None):
        raise ValueError("give exactly one of pvalues and neg_log10_pvalues")
    if pvalues is not None:
        p = np.atleast_1d(np.asarray(pvalues, dtype=float))
        if p.ndim != 1 or p.size == 0 or np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
            raise ValueError("pvalues must be a non-empty 1-d sequence of numbers in [0, 1]")
        with np.errstate(divide="ignore"):
            logp = np.log(p)
    else:
        nl = np.atleast_1d(np.asarray(neg_log10_pvalues, dtype=float))
        if nl.ndim != 1 or nl.size == 0 or np.any(np.isnan(nl)) or np.any(nl < 0):
            raise ValueError("neg_log10_pvalues must be a non-empty 1-d sequence of numbers >= 0")
        logp = -nl * LN10

    m = logp.size
    order = np.argsort(logp, kind="stable")
    ranks = np.arange(1, m + 1, dtype=float)
    sorted_logp = logp[order]
    if method == "bonferroni":
        adj_sorted = sorted_logp + np.log(m)
    elif method == "holm":
        # adjusted p_(i) = max_{j <= i} (m - j + 1) p_(j): the running max keeps it monotone
        adj_sorted = np.maximum.accumulate(sorted_logp + np.log(m - ranks + 1.0))
    else:
        scale = np.log(np.sum(1.0 / ranks)) if method == "by" else 0.0
        # adjusted p_(i) = min_{j >= i} m/j p_(j) (times c(m) = sum 1/j for BY)
        adj_sorted = np.minimum.accumulate((sorted_logp + np.log(m / ranks) + scale)[::-1])[::-1]
    adj_log = np.empty(m)
    adj_log[order] = np.minimum(adj_sorted, 0.0)
    adjusted = np.exp(adj_log)
    with np.errstate(invalid="ignore"):
        neg = np.where(adj_log == 0.0, 0.0, -adj_log / LN10)
    rejected = adj_log <= np.log(alpha)
    controls = "FWER" if method in ("holm", "bonferroni") else "FDR"
    return AdjustedPValues(adjusted, neg, rejected, method, alpha, controls)


@dataclass(frozen=True)
class SuiteVerdict:
    """Aggregate of scenario verdicts (the AgentAssay paper's suite verdict) with the counts
    behind it."""

    verdict: Verdict
    n_pass: int
    n_fail: int
    n_inconclusive: int


def suite_verdict(verdicts: Iterable[str]) -> SuiteVerdict:
    """Suite verdict (the AgentAssay paper's): FAIL if any scenario FAILs, else
    INCONCLUSIVE if any is INCONCLUSIVE, else PASS.

    The FAIL verdicts should come from multiplicity-corrected tests (:func:`adjust_pvalues`)
    so one spurious FAIL in a large suite stays rare. The PASS side needs no correction: the
    suite PASSes only if every scenario PASSes, an intersection-union test, whose level is
    the largest single-scenario level.
    """
    values = []
    for v in verdicts:
        try:
            values.append(Verdict(v))
        except ValueError:
            raise ValueError(f"verdicts must be PASS, FAIL or INCONCLUSIVE, got {v!r}") from None
    if not values:
        raise ValueError("verdicts must not be empty: a suite with no scenarios has no verdict")
    n_fail = sum(v is Verdict.FAIL for v in values)
    n_inc = sum(v is Verdict.INCONCLUSIVE for v in values)
    n_pass = len(values) - n_fail - n_inc
    if n_fail:
        v = Verdict.FAIL
    elif n_inc:
        v = Verdict.INCONCLUSIVE
    else:
        v = Verdict.PASS
    return SuiteVerdict(v, n_pass, n_fail, n_inc)
