"""Agent coverage metrics: how much of what an agent can do its trials exercised, in the
five dimensions of the AgentAssay paper (tool, decision path, state, boundary, model) and
their weighted geometric mean.

Each dimension is a :class:`CoverageDimension` whose ``value`` is None when it is undefined
(no denominator: no tools configured, no paths observed, ...). An undefined dimension is
reported as n/a and left out of the overall score, never counted as 1.0 — a suite that never
declared its models has not covered them all.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

from ._common import check_positive

DEFAULT_STATE_LAMBDA = 50.0


@dataclass(frozen=True)
class CoverageDimension:
    """One coverage dimension: ``value`` in [0, 1] or None (n/a) with what it was computed from.

    ``sample_coverage`` is the Good-Turing estimate 1 - f1/n of the probability that the next
    trial repeats an already-seen path/state (paths and states only).
    """

    name: str
    value: float | None
    observed: int
    denominator: float | None
    sample_coverage: float | None = None
    note: str = ""


def _as_counts(observations) -> Counter:
    """A frequency table from a mapping item -> count or an iterable of observed items."""
    if isinstance(observations, Mapping):
        counts = Counter()
        for key, value in observations.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"counts must be non-negative integers, got {value!r} for {key!r}")
            if value:
                counts[key] = value
        return counts
    return Counter(_hashable(x) for x in observations)


def _hashable(item):
    return tuple(_hashable(x) for x in item) if isinstance(item, list) else item


def good_turing_coverage(observations) -> float | None:
    """Good-Turing sample coverage 1 - f1/n (f1 = items seen exactly once, n = observations).

    None when nothing was observed.
    """
    counts = _as_counts(observations)
    n = sum(counts.values())
    if n == 0:
        return None
    f1 = sum(1 for c in counts.values() if c == 1)
    return 1.0 - f1 / n


def chao1(observations) -> float:
    """Bias-corrected Chao1 estimate of the number of distinct items, seen or not yet seen:
    d + ((n - 1) / n) f1 (f1 - 1) / (2 (f2 + 1)), with d items seen in n observations, f1 of
    them once and f2 twice (Chao 2005; EstimateS's default).

    The classic form d + f1² / (2 f2), which the AgentAssay paper uses, divides by zero when
    no item was seen twice and overstates the total on small samples, where paths are
    collected (ten trials of an agent whose every path is new give 10 + 100 / 0): the
    corrected form is finite everywhere, equals d when no item was seen once, and is close
    to the classic one when f2 is large.
    """
    counts = _as_counts(observations)
    n = sum(counts.values())
    d = len(counts)
    f1 = sum(1 for c in counts.values() if c == 1)
    f2 = sum(1 for c in counts.values() if c == 2)
    if n == 0:
        return 0.0
    return d + (n - 1) / n * f1 * (f1 - 1) / (2.0 * (f2 + 1))


def _ratio(name: str, used: Iterable, available: Iterable, what: str) -> CoverageDimension:
    available = set(available)
    used = set(used)
    if not available:
        return CoverageDimension(name, None, len(used), None, note=f"no {what} declared: n/a")
    hit = used & available
    extra = used - available
    note = f"{len(extra)} used but not declared: {sorted(map(str, extra))[:5]}" if extra else ""
    return CoverageDimension(name, len(hit) / len(available), len(hit), float(len(available)), note=note)


def tool_coverage(used: Iterable[str], available: Iterable[str]) -> CoverageDimension:
    """|tools used ∩ available| / |available|. Tools used but not declared are
    listed in ``note`` (the declaration is probably stale) and not counted."""
    return _ratio("tool", used, available, "available tools")


def boundary_coverage(tested: Iterable, boundaries: Iterable) -> CoverageDimension:
    """|boundaries tested| / |boundaries|; boundaries are any hashable ids,
    e.g. ("search", "limit", "max")."""
    return _ratio("boundary", tested, boundaries, "tool boundaries")


def model_coverage(tested: Iterable[str], target: Iterable[str]) -> CoverageDimension:
    """|models tested ∩ target| / |target|."""
    return _ratio("model", tested, target, "target models")


def path_coverage(paths) -> CoverageDimension:
    """Decision-path coverage d / Chao1: distinct paths seen over the estimated number of
    paths, since the feasible paths of an agent cannot be enumerated.

    ``paths`` is a mapping path -> number of trials that took it, or an iterable of observed
    paths (any hashable, e.g. tuples of (kind, tool) pairs; lists are converted). None when
    no trial was observed.
    """
    counts = _as_counts(paths)
    n = sum(counts.values())
    if n == 0:
        return CoverageDimension("path", None, 0, None, note="no paths observed: n/a")
    est = chao1(counts)
    return CoverageDimension("path", len(counts) / est, len(counts), est, good_turing_coverage(counts))


def state_coverage(states, lam: float = DEFAULT_STATE_LAMBDA) -> CoverageDimension:
    """State-space coverage 1 - exp(-|distinct abstract states| / lam), as the AgentAssay
    paper defines it: the state space is unbounded, so coverage saturates instead of being a
    share of a known total.

    ``lam`` is the expected number of distinct abstract states for the agent; the paper
    leaves it to calibration and gives no value. The default 50 means 50 distinct states give
    0.63 and 150 give 0.95; set it from your agent (e.g. the Chao1 estimate of its states on a
    large run). Values are only comparable between runs with the same ``lam`` and the same
    state abstraction. None when no state was observed.
    """
    lam = check_positive("lam", lam)
    counts = _as_counts(states)
    if not counts:
        return CoverageDimension("state", None, 0, lam, note="no states observed: n/a")
    d = len(counts)
    return CoverageDimension("state", -math.expm1(-d / lam), d, lam, good_turing_coverage(counts),
                             note=f"lambda={lam:g}")


@dataclass(frozen=True)
class CoverageReport:
    """The coverage tuple (one value per dimension) and the weighted geometric mean over the
    defined dimensions. ``undefined`` names the n/a dimensions; ``overall`` is None if all are."""

    dimensions: tuple[CoverageDimension, ...]
    overall: float | None
    weights: dict[str, float]
    undefined: tuple[str, ...]

    def get(self, name: str) -> CoverageDimension:
        for dim in self.dimensions:
            if dim.name == name:
                return dim
        raise KeyError(name)


def overall_coverage(dimensions: Iterable[CoverageDimension], weights: Mapping[str, float] | None = None
                     ) -> CoverageReport:
    """Weighted geometric mean prod C_i^{w_i} over the defined dimensions (the AgentAssay
    paper's overall coverage, with its optional weights), weights renormalised to sum to 1
    over those dimensions (equal by default). A zero in any weighted dimension makes the
    overall 0: a gap is not averaged away.
    """
    dims = tuple(dimensions)
    names = [d.name for d in dims]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate coverage dimensions: {names}")
    weights = dict(weights) if weights is not None else {name: 1.0 for name in names}
    unknown = set(weights) - set(names)
    if unknown:
        raise ValueError(f"weights name unknown dimensions: {sorted(unknown)}")
    for name, w in weights.items():
        check_positive(f"weights[{name!r}]", w, allow_zero=True)
    defined = [d for d in dims if d.value is not None and weights.get(d.name, 0.0) > 0.0]
    undefined = tuple(d.name for d in dims if d.value is None)
    total = sum(weights[d.name] for d in defined)
    if not defined or total == 0.0:
        return CoverageReport(dims, None, {}, undefined)
    used = {d.name: weights[d.name] / total for d in defined}
    if any(d.value == 0.0 for d in defined):
        overall = 0.0
    else:
        overall = math.exp(sum(used[d.name] * math.log(d.value) for d in defined))
    return CoverageReport(dims, overall, used, undefined)


def agent_coverage(
    *, tools_used=(), tools_available=(), paths=(), states=(), state_lambda: float = DEFAULT_STATE_LAMBDA,
    boundaries_tested=(), boundaries=(), models_tested=(), models_target=(),
    weights: Mapping[str, float] | None = None,
) -> CoverageReport:
    """All five dimensions and the overall score from the sets the analyzers
    produce. Anything not supplied is n/a."""
    return overall_coverage([
        tool_coverage(tools_used, tools_available),
        path_coverage(paths),
        state_coverage(states, state_lambda),
        boundary_coverage(boundaries_tested, boundaries),
        model_coverage(models_tested, models_target),
    ], weights)
