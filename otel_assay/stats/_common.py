"""Shared validation, verdict values and log-space helpers for otel_assay.stats.

Private module: the public names are re-exported by ``otel_assay.stats``.
"""

from __future__ import annotations

import math
from enum import StrEnum
from numbers import Integral, Real

import numpy as np

LN10 = math.log(10.0)


class Verdict(StrEnum):
    """Three-valued verdict: a statistical test on a handful of stochastic trials can show
    that a rate is above a bar, below it, or neither yet, and "neither" must not read as a
    pass. A ``str`` subclass, so it compares equal to ``"PASS"`` / ``"FAIL"`` /
    ``"INCONCLUSIVE"`` and serialises as text."""

    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"


def bracketed_root(f, lo: float, hi: float, *, xtol: float, rtol: float, max_iter: int = 500) -> float:
    """A root of the continuous ``f`` in [lo, hi], where f(lo) and f(hi) differ in sign.

    Bisection, to |hi - lo| <= xtol + rtol |x|. It stands in for scipy.optimize.brentq, whose
    import (scipy.optimize pulls in scipy.linalg and more) costs about 0.6 s of every gate
    run; the functions solved here cost microseconds, so ~60 halvings are nothing.
    """
    f_lo, f_hi = f(lo), f(hi)
    if f_lo == 0.0:
        return lo
    if f_hi == 0.0:
        return hi
    if (f_lo > 0.0) == (f_hi > 0.0):
        raise ValueError(f"f({lo}) and f({hi}) have the same sign; no root is bracketed")
    for _ in range(max_iter):
        mid = 0.5 * (lo + hi)
        if hi - lo <= xtol + rtol * abs(mid):
            return mid
        f_mid = f(mid)
        if f_mid == 0.0:
            return mid
        if (f_mid > 0.0) == (f_lo > 0.0):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def neg_log10(log_p: float) -> float:
    """-log10 p from a natural-log p-value (``inf`` when p is exactly 0)."""
    return -float(log_p) / LN10 if log_p != 0.0 else 0.0


def check_count(name: str, value, *, minimum: int = 0) -> int:
    """An integer >= ``minimum`` (bools and non-integral floats are rejected)."""
    if isinstance(value, bool) or not isinstance(value, (Integral, Real)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, Real) and not isinstance(value, Integral):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_trials(successes, n, *, successes_name: str = "successes", n_name: str = "n") -> tuple[int, int]:
    """Validate a binomial observation: n >= 1 and 0 <= successes <= n."""
    n = check_count(n_name, n, minimum=1)
    successes = check_count(successes_name, successes)
    if successes > n:
        raise ValueError(f"{successes_name} must be <= {n_name} ({n}), got {successes}")
    return successes, n


def check_open_unit(name: str, value) -> float:
    """A float strictly inside (0, 1): significance levels, thresholds, probabilities."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    value = float(value)
    if not (0.0 < value < 1.0):  # also rejects NaN
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return value


def check_positive(name: str, value, *, allow_zero: bool = False) -> float:
    """A finite float > 0 (or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0.0 or (value == 0.0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return value


def check_alternative(alternative: str, allowed: tuple[str, ...]) -> str:
    if alternative not in allowed:
        raise ValueError(f"alternative must be one of {allowed}, got {alternative!r}")
    return alternative


def check_finite_array(name: str, values, *, ndim: int | None = None) -> np.ndarray:
    """A float array with no NaN/inf, optionally of a given dimensionality."""
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric: {exc}") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name} contains NaN or inf (first at index {tuple(int(i) for i in bad)})")
    return arr


def make_rng(seed) -> np.random.Generator:
    """A Generator from an int seed, a SeedSequence or an existing Generator."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        raise ValueError("seed must be given (an int or a numpy Generator); results must be reproducible")
    return np.random.default_rng(seed)
