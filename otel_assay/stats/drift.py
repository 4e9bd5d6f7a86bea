"""Change detection for continuous monitoring: CUSUM and Page-Hinkley.

Feed them trial outcomes in time order (a drop in pass rate) or per-trial fingerprint
distances to a baseline (a rise in distance). Each detector is an object you update one value
at a time, and a function over a whole sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ._common import check_open_unit, check_positive


@dataclass(frozen=True)
class DriftResult:
    """Whether and when a detector alarmed. ``alarm_index`` is the 0-based index of the value
    that raised the alarm; ``path`` the detector statistic after each value."""

    alarm: bool
    alarm_index: int | None
    statistic: float
    threshold: float
    path: np.ndarray
    method: str


def _check_direction(direction: str) -> int:
    if direction not in ("increase", "decrease"):
        raise ValueError(f"direction must be 'increase' or 'decrease', got {direction!r}")
    return 1 if direction == "increase" else -1


def _finite(name: str, value) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


class CUSUM:
    """Page's one-sided CUSUM: S_t = max(0, S_{t-1} + s (x_t - target) - k), alarm when S_t > h,
    with s = +1 to detect an increase and -1 a decrease.

    ``k`` is usually half the shift worth detecting (in the units of x) and ``h`` trades delay
    against false alarms (h = 4-5 standard deviations of x gives an in-control run length of
    several hundred). For pass/fail outcomes prefer :func:`bernoulli_cusum`, whose threshold
    has a direct meaning.
    """

    method = "cusum"

    def __init__(self, target: float, k: float, h: float, direction: str = "increase"):
        self.target = _finite("target", target)
        self.k = check_positive("k", k, allow_zero=True)
        self.h = check_positive("h", h)
        self.sign = _check_direction(direction)
        self.statistic = 0.0
        self.n = 0
        self.alarm_index: int | None = None

    def _increment(self, x: float) -> float:
        return self.sign * (x - self.target) - self.k

    def update(self, x) -> bool:
        """Add one value; True once the detector has alarmed (it stays alarmed)."""
        self.statistic = max(0.0, self.statistic + self._increment(_finite("x", x)))
        if self.alarm_index is None and self.statistic > self.h:
            self.alarm_index = self.n
        self.n += 1
        return self.alarm_index is not None


class BernoulliCUSUM(CUSUM):
    """Log-likelihood-ratio CUSUM for a drop in pass rate from ``p0`` to ``p1`` < p0.

    Each pass adds log(p1/p0), each failure log((1-p1)/(1-p0)). Alarm when the statistic
    exceeds ``h``; the in-control average run length is at least e^h trials (Lorden 1971), so
    the default h = log(1000) means fewer than one false alarm per 1000 trials on average.
    """

    method = "bernoulli-cusum"

    def __init__(self, p0: float, p1: float, h: float = math.log(1000.0)):
        p0, p1 = check_open_unit("p0", p0), check_open_unit("p1", p1)
        if not p1 < p0:
            raise ValueError(f"p1 must be < p0 (a drop), got p0={p0}, p1={p1}")
        super().__init__(0.0, 0.0, h)
        self._pass, self._fail = math.log(p1 / p0), math.log((1.0 - p1) / (1.0 - p0))

    def _increment(self, x: float) -> float:
        if x not in (0.0, 1.0):
            raise ValueError(f"outcome must be 0/1 (or bool), got {x!r}")
        return self._pass if x == 1.0 else self._fail


class PageHinkley:
    """Page-Hinkley test: m_t = sum_{i<=t} s (x_i - mean_i - delta), alarm when
    m_t - min_{j<=t} m_j > threshold (s = +1 for an increase, -1 for a decrease).

    Needs no in-control mean: it compares each value with the running mean. ``delta`` is the
    magnitude of change to ignore, ``threshold`` (lambda) the evidence needed.
    """

    method = "page-hinkley"

    def __init__(self, delta: float, threshold: float, direction: str = "increase"):
        self.delta = check_positive("delta", delta, allow_zero=True)
        self.h = check_positive("threshold", threshold)
        self.sign = _check_direction(direction)
        self.n = 0
        self._mean = 0.0
        self._m = 0.0
        self._min = 0.0
        self.alarm_index: int | None = None

    @property
    def statistic(self) -> float:
        return self._m - self._min

    def update(self, x) -> bool:
        """Add one value; True once the detector has alarmed (it stays alarmed)."""
        x = _finite("x", x)
        self._mean += (x - self._mean) / (self.n + 1)
        self._m += self.sign * (x - self._mean) - self.delta
        self._min = min(self._min, self._m)
        if self.alarm_index is None and self.statistic > self.h:
            self.alarm_index = self.n
        self.n += 1
        return self.alarm_index is not None


def _run(detector, values: Iterable) -> DriftResult:
    path = []
    for x in values:
        detector.update(x)
        path.append(detector.statistic)
    return DriftResult(detector.alarm_index is not None, detector.alarm_index, detector.statistic, detector.h,
                       np.array(path), detector.method)


def cusum(values: Iterable, target: float, k: float, h: float, direction: str = "increase") -> DriftResult:
    """Run :class:`CUSUM` over a sequence (e.g. fingerprint distances to the baseline)."""
    return _run(CUSUM(target, k, h, direction), values)


def bernoulli_cusum(outcomes: Iterable, p0: float, p1: float, h: float = math.log(1000.0)) -> DriftResult:
    """Run :class:`BernoulliCUSUM` over trial outcomes in time order."""
    return _run(BernoulliCUSUM(p0, p1, h), (float(o) for o in outcomes))


def page_hinkley(values: Iterable, delta: float, threshold: float, direction: str = "increase") -> DriftResult:
    """Run :class:`PageHinkley` over a sequence."""
    return _run(PageHinkley(delta, threshold, direction), values)
