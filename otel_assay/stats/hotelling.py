"""Two-sample Hotelling T² test on behavioural fingerprints: the AgentAssay paper's
fingerprint regression test, which sees a change in how an agent works (tools, steps,
tokens) even when its pass rate holds.

Pipeline: standardise every feature with the mean and SD of both arms together, drop the
features that are constant over both arms, project on the principal components of the
combined sample that explain >= 95 % of its variance (their number is the effective
dimension d_eff), shrink the pooled within-arm covariance when trials are few for the
dimension, and compute T². The p-value is exact by permutation for small samples (default
when n_b + n_c < 100) and from the F distribution otherwise.

Why the combined sample, not the pooled within-arm one, drives standardisation and PCA: the
combined sample does not depend on which trial carries which label, so the projection (and
the shrinkage target) is the same for every relabelling and the permutation test is exact.
A shift between the arms adds variance along its own direction, so PCA keeps it rather than
discarding it.

Permutations are cheap because the total scatter T is label-free: with d the difference of
the arm means in PC coordinates, c = n_b n_c / n, and A the (diagonal) shrunk scatter, the
pooled covariance is A - gamma d d' and by Sherman-Morrison T² = c q / (1 - gamma q) with
q = sum_j d_j² / A_j. T² is increasing in q, so each permutation costs one matrix product.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, comb, fdtrc, fdtri, ncfdtr

from ._common import (Verdict, bracketed_root, check_count, check_finite_array, check_open_unit, make_rng,
                      neg_log10)

_AUTO_PERMUTATION_BELOW = 100  # n_b + n_c below which the permutation p-value is the default
_SHRINK_BELOW_PER_DIM = 5  # shrink when n_b + n_c - 2 < 5 d_eff
_CHUNK_CELLS = 4_000_000  # permutation labels generated per block (memory bound)
_MATMUL_ROWS = 1024


@dataclass(frozen=True)
class FeatureShift:
    """How far one feature moved: standardised mean difference (candidate - baseline) / pooled
    within-arm SD (Cohen's d; +-inf when both arms are constant at different values). The
    arms' own SDs tell a report when the pooled SD is one arm's spread alone (the other arm
    constant), where "-207 SD" says less than "6 -> 4.2, constant in the baseline"."""

    name: str
    smd: float
    baseline_mean: float
    candidate_mean: float
    baseline_sd: float = 0.0
    candidate_sd: float = 0.0


@dataclass(frozen=True)
class HotellingResult:
    """Outcome of :func:`hotelling_t2`.

    ``verdict`` is FAIL when ``pvalue`` < ``alpha`` (a shift), PASS otherwise, INCONCLUSIVE
    when the test cannot reject at any data (too few trials; see ``reason``). A gate testing
    many scenarios should correct ``pvalue`` for multiplicity instead of using ``verdict``.
    ``min_detectable_shift`` is the smallest Mahalanobis shift (in the retained components)
    this design detects with power 1 - beta (noncentral F), so a PASS on few trials reads as
    the weak evidence it is.
    """

    verdict: Verdict
    reason: str
    statistic: float
    f_statistic: float | None
    df: tuple[int, int] | None
    pvalue: float
    neg_log10_pvalue: float
    method: str
    n_permutations: int | None
    d_eff: int
    n_features: int
    dropped_features: tuple[str, ...]
    shrinkage: float
    n_baseline: int
    n_candidate: int
    top_features: tuple[FeatureShift, ...]
    min_detectable_shift: float | None
    alpha: float


def hotelling_t2(
    baseline, candidate, *, alpha: float = 0.05, beta: float = 0.2, method: str = "auto",
    n_permutations: int = 9999, seed=0, variance_explained: float = 0.95, shrinkage="auto",
    feature_names=None, top_k: int = 5,
) -> HotellingResult:
    """Two-sample Hotelling T² test of equal mean fingerprints.

    ``baseline`` (n_b x d) and ``candidate`` (n_c x d) hold one fingerprint per trial. A 1-d
    array is one feature. NaN/inf raise ``ValueError`` (impute upstream: a missing value is
    not a number the test can reason about).

    - ``method``: ``"auto"`` (permutation when n_b + n_c < 100 or the covariance is shrunk,
      else F), ``"permutation"`` or ``"F"``. The permutation p-value enumerates every split
      when there are at most ``n_permutations`` + 1 of them (exact), otherwise draws
      ``n_permutations`` random relabellings from ``seed`` and reports (1 + #{T*² >= T²}) /
      (B + 1), which is exactly valid at any sample size and distribution.
    - ``shrinkage``: ``"auto"`` applies Ledoit-Wolf shrinkage toward the mean variance when
      n_b + n_c - 2 < 5 d_eff (estimated on the combined sample so it is label-free), else
      none; or a number in [0, 1]. With shrinkage the F reference no longer applies, so
      ``"auto"`` switches to permutation.
    - ``variance_explained``: the PCA threshold for d_eff (1.0 keeps every non-degenerate
      component, which reproduces the classical T² on the raw features).

    The F p-value is computed in log space, so a decisive shift reports ``neg_log10_pvalue``
    of 400 rather than a p of 0.
    """
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    if method not in ("auto", "permutation", "F"):
        raise ValueError(f"method must be 'auto', 'permutation' or 'F', got {method!r}")
    n_permutations = check_count("n_permutations", n_permutations, minimum=1)
    if not (0.0 < float(variance_explained) <= 1.0):
        raise ValueError(f"variance_explained must be in (0, 1], got {variance_explained!r}")
    top_k = check_count("top_k", top_k)
    xb = _as_matrix("baseline", baseline)
    xc = _as_matrix("candidate", candidate)
    if xb.shape[1] != xc.shape[1]:
        raise ValueError(f"baseline has {xb.shape[1]} features but candidate has {xc.shape[1]}")
    d = xb.shape[1]
    names = _feature_names(feature_names, d)
    n_b, n_c = xb.shape[0], xc.shape[0]
    n = n_b + n_c
    c = n_b * n_c / n
    if not isinstance(seed, (int, np.integer, np.random.Generator)) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int or a numpy Generator, got {seed!r}")

    # Every feature is divided by its largest magnitude first: the test is invariant to the
    # scale of each feature, and squares of values beyond ~1e154 (a corrupt cost or token
    # count) would overflow to inf and crash it. Constancy is still judged in the data's units.
    col_scale = np.max(np.abs(np.vstack([xb, xc])), axis=0)
    col_scale[col_scale == 0.0] = 1.0
    xb, xc = xb / col_scale, xc / col_scale
    x = np.vstack([xb, xc])
    mean = x.mean(axis=0)
    sd = x.std(axis=0, ddof=1) if n > 1 else np.zeros(d)
    constant = sd <= 1e-12 * np.maximum(1.0 / col_scale, np.abs(mean))
    dropped = tuple(name for name, drop in zip(names, constant) if drop)
    top = _top_features(xb, xc, names, top_k, col_scale)
    common = dict(n_features=d, dropped_features=dropped, n_baseline=n_b, n_candidate=n_c,
                  top_features=top, alpha=alpha)

    # Smallest p-value any labelling could produce: when it is >= alpha nothing can be
    # detected and PASS would claim evidence the data cannot hold.
    splits = float(comb(n, n_b, exact=False))
    min_p = (2.0 if n_b == n_c else 1.0) / splits
    if min_p >= alpha:
        return _degenerate(Verdict.INCONCLUSIVE,
                           f"too few trials ({n_b} + {n_c}): no split of them reaches p < alpha={alpha}",
                           min_p, **common)
    if constant.all():
        return _degenerate(Verdict.PASS, "every feature is constant and equal in both arms: no shift", 1.0,
                           **common)

    z = (x[:, ~constant] - mean[~constant]) / sd[~constant]
    eigval, eigvec = np.linalg.eigh(z.T @ z / (n - 1))
    eigval, eigvec = eigval[::-1], eigvec[:, ::-1]
    rank = int(np.sum(eigval > 1e-10 * eigval[0]))
    share = np.cumsum(eigval[:rank]) / eigval[:rank].sum()
    d_eff = min(rank, int(np.searchsorted(share, float(variance_explained) - 1e-12) + 1))
    scores = z @ eigvec[:, :d_eff]  # PC scores; column j has variance eigval[j]
    lam = eigval[:d_eff]

    if shrinkage == "auto":
        shrink = _ledoit_wolf(scores) if n - 2 < _SHRINK_BELOW_PER_DIM * d_eff else 0.0
    else:
        try:
            shrink = float(shrinkage)
        except (TypeError, ValueError):
            raise ValueError(f"shrinkage must be 'auto' or a number in [0, 1], got {shrinkage!r}") from None
        if not 0.0 <= shrink <= 1.0:
            raise ValueError(f"shrinkage must be 'auto' or a number in [0, 1], got {shrinkage!r}")
    # pooled within-arm covariance = A - gamma d d' (A diagonal, label-free); n >= 3 here
    a_diag = (1.0 - shrink) * (n - 1) * lam / (n - 2) + shrink * lam.mean()
    gamma = (1.0 - shrink) * c / (n - 2)
    white = scores / np.sqrt(a_diag)
    scale = n / (n_b * n_c)  # d = scale * (sum of the baseline rows), as scores are centred
    d_obs = white[:n_b].sum(axis=0) * scale
    q_obs = float(d_obs @ d_obs)
    denom = 1.0 - gamma * q_obs
    t2 = math.inf if denom <= 1e-14 else c * q_obs / denom

    df2 = n - d_eff - 1
    use_perm = method == "permutation" or (method == "auto" and (n < _AUTO_PERMUTATION_BELOW or shrink > 0.0))
    if use_perm and comb(n, n_b, exact=True) > n_permutations + 1 and 1.0 / (n_permutations + 1) >= alpha:
        # random relabellings give p >= 1 / (B + 1): a PASS would claim what the test cannot see
        return _degenerate(Verdict.INCONCLUSIVE,
                           f"{n_permutations} random permutations cannot give p < alpha={alpha} (the smallest "
                           f"p-value is 1/{n_permutations + 1}); use more permutations", 1.0 / (n_permutations + 1),
                           **common)
    if method == "F" and df2 < 1:
        raise ValueError(f"the F approximation needs n_b + n_c > d_eff + 1 (n={n}, d_eff={d_eff}); "
                         "use method='permutation'")
    f_stat = t2 * df2 / ((n - 2) * d_eff) if df2 >= 1 else None
    df = (d_eff, df2) if f_stat is not None else None
    if use_perm:
        log_p, used_method, b_used = _permutation_log_pvalue(white, n_b, q_obs, scale, n_permutations, seed)
    else:
        log_p, used_method, b_used = _log_f_sf(f_stat, d_eff, df2), "F", None

    p = math.exp(log_p)
    if p < alpha:
        v, reason = Verdict.FAIL, f"fingerprint shift: p={p:.3g} < alpha={alpha} ({used_method}, d_eff={d_eff})"
    else:
        v, reason = Verdict.PASS, f"no fingerprint shift detected: p={p:.3g} >= alpha={alpha} ({used_method}, d_eff={d_eff})"
    if math.isinf(t2):
        reason += "; the arms are perfectly separated (no within-arm variance along the shift)"
    return HotellingResult(
        v, reason, t2, f_stat, df, p, neg_log10(log_p), used_method, b_used, d_eff,
        shrinkage=shrink, min_detectable_shift=hotelling_detectable_shift(n_b, n_c, d_eff, alpha, beta),
        **common,
    )


def _as_matrix(name: str, values) -> np.ndarray:
    arr = check_finite_array(name, values)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-d array (trials x features), got shape {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} needs at least one trial and one feature, got shape {arr.shape}")
    return arr


def _feature_names(feature_names, d: int) -> tuple[str, ...]:
    if feature_names is None:
        return tuple(f"feature_{i}" for i in range(d))
    names = tuple(str(x) for x in feature_names)
    if len(names) != d:
        raise ValueError(f"feature_names has {len(names)} names for {d} features")
    return names


def _top_features(xb, xc, names, top_k, col_scale) -> tuple[FeatureShift, ...]:
    """From the rescaled arms (the SMD is scale-free; the means are reported in data units)."""
    n_b, n_c = len(xb), len(xc)
    mb, mc = xb.mean(axis=0), xc.mean(axis=0)
    ss = ((xb - mb) ** 2).sum(axis=0) + ((xc - mc) ** 2).sum(axis=0)
    pooled = np.sqrt(ss / (n_b + n_c - 2)) if n_b + n_c > 2 else np.zeros_like(mb)
    diff = mc - mb
    with np.errstate(divide="ignore", invalid="ignore"):
        smd = np.where(pooled > 0, diff / np.where(pooled > 0, pooled, 1.0),
                       np.where(diff == 0, 0.0, np.sign(diff) * np.inf))
    order = np.argsort(-np.abs(smd), kind="stable")[:top_k]
    sd_b, sd_c = xb.std(axis=0), xc.std(axis=0)
    return tuple(FeatureShift(names[i], float(smd[i]), float(mb[i] * col_scale[i]), float(mc[i] * col_scale[i]),
                              float(sd_b[i] * col_scale[i]), float(sd_c[i] * col_scale[i]))
                 for i in order)


def _ledoit_wolf(x: np.ndarray) -> float:
    """Ledoit-Wolf (2004) shrinkage intensity toward the scaled identity, for centred rows x."""
    n = x.shape[0]
    s = x.T @ x / n
    mu = np.trace(s) / s.shape[0]
    dist = np.sum((s - mu * np.eye(s.shape[0])) ** 2)
    if dist <= 0.0:
        return 0.0
    spread = (np.sum(np.sum(x * x, axis=1) ** 2) - n * np.sum(s * s)) / n**2
    return float(min(max(spread, 0.0), dist) / dist)


def _degenerate(v, reason, p, **common) -> HotellingResult:
    return HotellingResult(v, reason, 0.0, None, None, float(min(p, 1.0)), neg_log10(math.log(min(p, 1.0))),
                           "none", None, 0, shrinkage=0.0, min_detectable_shift=None, **common)


def _permutation_log_pvalue(white, n_b, q_obs, scale, n_permutations, seed):
    n = white.shape[0]
    threshold = q_obs * (1.0 - 1e-10)  # ties in q must count as ">=" despite rounding
    splits = comb(n, n_b, exact=True)
    if splits <= n_permutations + 1:
        sums = _all_splits(n, n_b) @ white * scale
        hits = int(np.count_nonzero(np.einsum("ij,ij->i", sums, sums) >= threshold))
        return math.log(hits / splits), "exact-permutation", splits
    hits = 0
    for labels in _random_splits(n, n_b, n_permutations, seed):
        # Row blocks of 1024: small products stay single-threaded in BLAS, which on a shared
        # 2-core machine is several times faster than one large threaded product.
        for start in range(0, labels.shape[0], _MATMUL_ROWS):
            sums = labels[start:start + _MATMUL_ROWS] @ white * scale
            hits += int(np.count_nonzero(np.einsum("ij,ij->i", sums, sums) >= threshold))
    return math.log((1 + hits) / (n_permutations + 1)), "permutation", n_permutations


@functools.lru_cache(maxsize=8)
def _all_splits(n: int, n_b: int) -> np.ndarray:
    """0/1 label rows for every way to choose the n_b baseline trials (read-only, cached)."""
    idx = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), n_b)), dtype=np.intp)
    idx = idx.reshape(-1, n_b)
    labels = np.zeros((idx.shape[0], n))
    np.put_along_axis(labels, idx, 1.0, axis=1)
    labels.flags.writeable = False
    return labels


def _random_splits(n: int, n_b: int, count: int, seed):
    """Random 0/1 label rows, in blocks that bound memory.

    With an int seed the labels are a pure function of (n, n_b, count, seed) and are cached:
    a suite of scenarios with the same arm sizes reuses one draw (each scenario's test stays
    exact; only the Monte Carlo noise is shared) instead of paying for it 200 times.
    """
    rows = max(1, _CHUNK_CELLS // n)
    if isinstance(seed, (int, np.integer)) and count <= rows:
        yield _cached_random_splits(n, n_b, count, int(seed))
        return
    rng = make_rng(seed)
    base = np.zeros(n)
    base[:n_b] = 1.0
    for start in range(0, count, rows):
        yield rng.permuted(np.broadcast_to(base, (min(rows, count - start), n)), axis=1)


@functools.lru_cache(maxsize=8)
def _cached_random_splits(n: int, n_b: int, count: int, seed: int) -> np.ndarray:
    base = np.zeros(n)
    base[:n_b] = 1.0
    labels = np.random.default_rng(seed).permuted(np.broadcast_to(base, (count, n)), axis=1)
    labels.flags.writeable = False
    return labels


def _log_f_sf(x: float, d1: int, d2: int) -> float:
    """log P(F(d1, d2) > x) without underflow.

    P(F > x) = I_w(d2/2, d1/2) with w = d2 / (d2 + d1 x). Where the survival function is
    representable scipy's value is used; below 1e-290, w is tiny and the power series
    I_w(a, b) = w^a (1-w)^b / (a B(a, b)) * sum_k (a+b)_k / (a+1)_k w^k converges in a few
    terms, so it is summed in log space.
    """
    if math.isinf(x):
        return -math.inf
    sf = float(fdtrc(d1, d2, x))
    if sf > 1e-290:
        return math.log(sf)
    return _log_betainc_series(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * x))


def _log_betainc_series(a: float, b: float, w: float) -> float:
    """log I_w(a, b) by its power series; converges fast for small w."""
    total, term, k = 1.0, 1.0, 0
    while term > 1e-17 * total and k < 100_000:
        term *= (a + b + k) / (a + 1.0 + k) * w
        total += term
        k += 1
    return a * math.log(w) + b * math.log1p(-w) - math.log(a) - betaln(a, b) + math.log(total)


def hotelling_detectable_shift(n_baseline: int, n_candidate: int, d_eff: int, alpha: float = 0.05,
                               beta: float = 0.2) -> float | None:
    """Smallest Mahalanobis shift Delta_M the T² test detects with power 1 - beta.

    Under a shift Delta_M the F statistic is noncentral F(d_eff, n - d_eff - 1) with
    noncentrality c Delta_M², c = n_b n_c / n; this solves
    P(F > F_{1-alpha}) = 1 - beta for Delta_M. The permutation test has the same power
    asymptotically, so the figure also describes it. None when n <= d_eff + 1 (no F reference).
    """
    n_b = check_count("n_baseline", n_baseline, minimum=1)
    n_c = check_count("n_candidate", n_candidate, minimum=1)
    d_eff = check_count("d_eff", d_eff)
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    n = n_b + n_c
    df2 = n - d_eff - 1
    if d_eff < 1 or df2 < 1:
        return None
    c = n_b * n_c / n
    crit = fdtri(d_eff, df2, 1.0 - alpha)
    power = lambda nc: beta - ncfdtr(d_eff, df2, nc, crit)  # noqa: E731  (power - (1 - beta))
    if power(0.0) >= 0.0:  # alpha >= 1 - beta: even no shift "detects"
        return 0.0
    hi = 1.0
    while power(hi) < 0:
        hi *= 2.0
    nc = bracketed_root(power, 0.0, hi, xtol=1e-10, rtol=1e-10)
    return math.sqrt(nc / c)
