"""Anytime-valid decisions on pass rates: tests that stay valid however often one looks.

Users gate, see INCONCLUSIVE, add trials and gate again. A fixed-sample test read at every
such look errs more often with each look: with up to 10 looks between 20 and 200 trials per
version, a Fisher test at alpha = .05 FAILs an unchanged agent about 10 % of the time. The
tests here do not: each is an *e-process*, a running product of fair bets against its null
hypothesis, which under the null is a nonnegative supermartingale that starts at 1. By
Ville's inequality it ever reaches 1/alpha with probability at most alpha, whatever the
trial counts at which anyone looks, however often, and even if one looked after every
trial. The lake keeps every trial in order, so a test is evaluated at every prefix of the
trials (its running maximum): a decision reached at an earlier count stays reached, and how
often the gate ran makes no difference. No record of earlier looks is needed, which a
group-sequential design would need (its looks must be planned or logged, and a gate re-run
in a fresh CI checkout would silently forget them).

Regression (two versions): the i-th pair of outcomes gives d_i = b_i - c_i in {-1, 0, 1}
(1: the baseline passed and the candidate failed). Pairs are trials with the same index when
both versions ran the same indices (then a shared input cancels out of d_i and fewer trials
decide), and otherwise the two versions' trials in run order. The mean of d_i is the drop
p_b - p_c, and:

- FAIL bets against "no drop" (E d <= 0) with wealth prod(1 + l_i d_i): a significant drop.
- PASS bets against "a drop of delta or more" (E d >= delta) with prod(1 + l_i (delta - d_i)):
  non-inferiority, so P(PASS | true drop >= delta) <= alpha.

Pass rate against a threshold theta (one version): outcomes x_i in {0, 1}, PASS bets against
p <= theta with prod(1 + l_i (x_i - theta)), FAIL against p >= theta with
prod(1 + l_i (theta - x_i)).

When the baseline's runs vary (each run's conditions shift its pass rate: the provider's
model of the day, a tool's load), the mean drop of an unchanged agent is not 0 but the
difference of the runs' shifts, and the tests above would read it as a change. Given
``run_margin`` (see ``between_runs``), alpha is split: ``RUN_SHARE`` of it covers the runs'
shifts, with a margin m they exceed with probability RUN_SHARE alpha, and the rest is the
bettors': FAIL bets against E d <= m, PASS against E d >= delta - m. A FAIL then errs only
if the shifts exceed m or the bettor errs given they did not. The FAIL test's p-value is the
smallest level on a grid at which (and at every grid level above which, up to one half) the
test with that level's margin rejects: its margin depends on the level, so 1 / wealth is
not one.

Each bet size l_i is fixed before trial i is seen (it uses trials 1..i-1 only: that is what
keeps the wealth a supermartingale). It is the growth-optimal size for the design
alternative, l = g / (v + g^2) with g the distance of the alternative from the null and v the
variance of the observations, both estimated from the trials so far with a weak prior:
g is at least delta (the alternative the test is designed for) and grows with the observed
distance, so a drop of 2 delta FAILs sooner than a drop of delta. A bet never risks more
than ``MAX_FRACTION`` of the wealth on one trial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ._common import Verdict, check_count, check_open_unit, make_rng

# the largest share of the wealth one trial can lose: a bet that could lose everything would
# end the test on one unlucky trial, and 0.8 gave the shortest expected runs in simulation
# (0.5 was slower at pass rates near 1, where the optimal bet is large)
MAX_FRACTION = 0.8
# the prior on the variance of the observations is the largest they can have (0.5 for the
# difference of two independent outcomes, 0.25 for one outcome), with the weight of 4
# trials: a weak prior keeps the first bets small, and is forgotten after a few dozen trials
PRIOR_WEIGHT = 4.0
# the resolution of the reported bounds (a pass rate to half a point)
BOUND_STEP = 0.005
# the share of alpha that covers the runs' shifts when the baseline's runs vary. Simulated
# (between-run SD 0 to .1, 3 to 10 baseline runs, 200 trials per arm) shares of 0.1 to 0.5
# all held alpha; a larger share narrows the margin and leaves the bettors less, and their
# power differed by a few points either way
RUN_SHARE = 0.2
# the levels the FAIL test with a run margin is tried at, for its p-value: 50 a decade, up
# to one half (a p-value of 0.5 or more says nothing a gate uses)
_LEVELS = np.logspace(-10.0, math.log10(0.5), 490)


def _log_wealth(x: np.ndarray, null, sign: float, gain_floor: float, low: float, high: float) -> np.ndarray:
    """log wealth after each trial of the bettor against E x <= null (sign +1) or E x >= null
    (sign -1), for each row of ``x`` (trials in order along the last axis); x lies in
    [low, high]. ``null`` is a number or a column of them, one per row.

    The bet on trial i, l_i (sign (x_i - null)), uses trials before i only.
    """
    n = x.shape[-1]
    k = np.arange(n, dtype=float)
    zero = np.zeros(x.shape[:-1] + (1,))
    s1 = np.concatenate([zero, np.cumsum(x, axis=-1)[..., :-1]], axis=-1)
    s2 = np.concatenate([zero, np.cumsum(x * x, axis=-1)[..., :-1]], axis=-1)
    w = PRIOR_WEIGHT + k
    mean = s1 / w
    centred = (s2 - s1 * s1 / np.maximum(k, 1.0)) / np.maximum(k, 1.0)
    # the variance: the prior's until trials accumulate (k / w of the weight is the data's)
    prior_var = (high - low) ** 2 / (8.0 if low < 0.0 else 4.0)
    var = (PRIOR_WEIGHT * prior_var + k * centred) / w
    gain = np.maximum(gain_floor, sign * (mean - null))
    # the largest loss of one trial is at the end of the range opposite the bet
    worst = (null - low) if sign > 0 else (high - null)
    bet = np.minimum(gain / (np.maximum(var, 1e-12) + gain * gain), MAX_FRACTION / worst)
    return np.cumsum(np.log1p(bet * sign * (x - null)), axis=-1)


def _first(reached: np.ndarray) -> np.ndarray:
    """1-based index of the first True along the last axis, 0 when none."""
    if reached.shape[-1] == 0:
        return np.zeros(reached.shape[:-1], dtype=int)
    any_ = reached.any(axis=-1)
    return np.where(any_, reached.argmax(axis=-1) + 1, 0)


@dataclass(frozen=True)
class AnytimeResult:
    """One anytime-valid decision over trials in order.

    ``verdict`` is FAIL when the FAIL test reached 1/alpha at some prefix (before any
    multiplicity correction: a caller with several tests compares ``pvalue_fail`` with its
    adjusted level), else PASS when the PASS test did, else INCONCLUSIVE. ``e_pass`` and
    ``e_fail`` are the largest wealth each test reached; ``pvalue_*`` = min(1, 1 / e) are
    anytime-valid p-values. ``pass_at`` / ``fail_at``: the trial (pair) count at which each
    test first reached 1/alpha, or None. ``estimate`` is the observed drop (regression) or
    pass rate (threshold); ``lower`` / ``upper`` its anytime-valid 1 - alpha bounds (each
    one-sided). ``futile``: the PASS test's wealth is now at most beta / (1 - alpha) and the
    FAIL test's at most 1 — the data so far lie between the two decisions, and more trials
    are unlikely to reach either soon (advice for stopping a run; it does not change a
    verdict, and going on keeps every guarantee). ``margin``: the drop the baseline's
    runs' shifts alone could explain (regression with ``run_margin``, else 0): FAIL needs
    the drop to exceed it, PASS to stay below delta minus it, and ``e_*`` are the wealth of
    those tests (which decide at 1 / ((1 - RUN_SHARE) alpha) then).
    """

    verdict: Verdict
    n: int
    estimate: float
    lower: float
    upper: float
    e_pass: float
    e_fail: float
    pvalue_pass: float
    pvalue_fail: float
    pass_at: int | None
    fail_at: int | None
    futile: bool
    alpha: float
    delta: float
    margin: float = 0.0


def _decide(log_pass: np.ndarray, log_fail: np.ndarray, alpha: float, beta: float):
    thr = math.log(1.0 / alpha)
    pass_at, fail_at = int(_first(log_pass >= thr)), int(_first(log_fail >= thr))
    mp = float(np.max(log_pass, initial=0.0))
    mf = float(np.max(log_fail, initial=0.0))
    futile = bool(log_pass.size and log_pass[-1] <= math.log(beta / (1.0 - alpha)) and log_fail[-1] <= 0.0)
    verdict = Verdict.FAIL if fail_at else Verdict.PASS if pass_at else Verdict.INCONCLUSIVE
    return verdict, pass_at or None, fail_at or None, math.exp(mp), math.exp(mf), futile


def _outcomes(name: str, values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-d sequence of outcomes")
    if arr.dtype != bool:
        if not np.all(np.isin(arr, (0, 1))):
            raise ValueError(f"{name} must hold outcomes: True/False or 1/0")
        arr = arr.astype(bool)
    return arr


def _bounds(x: np.ndarray, alpha: float, delta: float, low: float, high: float) -> tuple[float, float]:
    """Anytime-valid one-sided 1 - alpha bounds on E x: the confidence set is every null no
    test rejected at any prefix (each test errs with probability <= alpha, so the true mean
    is out of it with probability <= alpha on each side). Nulls are tried on a grid of
    ``BOUND_STEP``; the bounds are the set's extremes widened by one step, so that a null
    between two grid points is never excluded unseen."""
    if x.size == 0:
        return low, high
    inner = np.round(low + BOUND_STEP * np.arange(1, int(round((high - low) / BOUND_STEP))), 10)[:, None]
    thr = math.log(1.0 / alpha)
    step = max(1, 2_000_000 // x.size)
    below, above = [], []
    for i in range(0, inner.shape[0], step):
        nulls = inner[i:i + step]
        xs = np.broadcast_to(x, (nulls.shape[0], x.size))
        below.append((_log_wealth(xs, nulls, +1.0, delta, low, high) >= thr).any(axis=-1))
        above.append((_log_wealth(xs, nulls, -1.0, delta, low, high) >= thr).any(axis=-1))
    kept = ~(np.concatenate(below) | np.concatenate(above))
    inner = inner[:, 0]
    if not kept.any():  # every value rejected from one side or the other: the set is empty
        return float(x.mean()), float(x.mean())
    return max(low, float(inner[kept].min()) - BOUND_STEP), min(high, float(inner[kept].max()) + BOUND_STEP)


def _fail_pvalue(d: np.ndarray, run_margin, delta: float, alpha: float) -> float:
    """The p-value of the FAIL test with a run margin: the smallest level on the grid (with
    alpha on it) from which up every grid level rejects. Valid: p <= a means the test of the
    largest grid level <= a rejected, which it does with probability <= that level. Levels
    are tried from the top down, a few at a time (twice as many each time all rejected),
    until one does not reject."""
    levels = np.union1d(_LEVELS, [alpha])[::-1]
    p, i, size = 1.0, 0, 20
    while d.size and i < levels.size:
        chunk = levels[i:i + size]
        i, size = i + size, 2 * size
        margins = np.array([run_margin(RUN_SHARE * g) for g in chunk])[:, None]
        wealth = _log_wealth(np.broadcast_to(d, (chunk.size, d.size)), margins, +1.0, delta, -1.0, 1.0)
        rejected = (wealth >= np.log(1.0 / ((1.0 - RUN_SHARE) * chunk))[:, None]).any(axis=-1)
        if not rejected.all():
            stop = int(rejected.argmin())
            return float(chunk[stop - 1]) if stop else p
        p = float(chunk[-1])
    return p


def anytime_regression(baseline, candidate, delta: float, alpha: float = 0.05, beta: float = 0.2, *,
                       bounds: bool = True, run_margin: Callable[[float], float] | None = None) -> AnytimeResult:
    """Did the candidate's pass rate drop by delta or more from the baseline's? Anytime-valid.

    ``baseline`` and ``candidate`` are outcomes (bool or 0/1) of equal length, the i-th of
    each forming a pair, in the order the trials ran (see the module docstring for how to
    pair). FAIL: a significant drop (P(FAIL | no drop) <= alpha at any look); PASS: the drop
    is below delta (P(PASS | drop >= delta) <= alpha at any look). ``bounds=False`` leaves
    out the confidence bounds (``lower``/``upper`` are then -1 and 1), which cost a few
    hundred tests: for a run that re-tests after every trial.

    ``run_margin``: when the baseline's runs vary, the drop their shifts alone exceed with
    probability ``level``, as a function of ``level`` (``BetweenRuns.margin``); both tests
    then need the drop to clear it (``margin`` in the result; see the module docstring).
    The baseline's runs should take turns in the pairs' order, so that every stretch of
    pairs has the mean drop of all of them.
    """
    delta = check_open_unit("delta", delta)
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    b, c = _outcomes("baseline", baseline), _outcomes("candidate", candidate)
    if b.size != c.size:
        raise ValueError(f"baseline and candidate must pair one to one, got {b.size} and {c.size} outcomes")
    d = b.astype(float) - c.astype(float)
    margin, level = 0.0, alpha
    if run_margin is not None:
        margin, level = float(run_margin(RUN_SHARE * alpha)), (1.0 - RUN_SHARE) * alpha
    log_fail = _log_wealth(d[None, :], margin, +1.0, delta, -1.0, 1.0)[0]
    log_pass = _log_wealth(d[None, :], delta - margin, -1.0, delta, -1.0, 1.0)[0]
    verdict, pass_at, fail_at, e_pass, e_fail, futile = _decide(log_pass, log_fail, level, beta)
    p_fail = min(1.0, 1.0 / e_fail)
    if run_margin is not None:
        p_fail = _fail_pvalue(d, run_margin, delta, alpha)
        if verdict == Verdict.FAIL and p_fail > alpha:  # crossed at alpha, not at every level above it
            verdict, fail_at = (Verdict.PASS if pass_at else Verdict.INCONCLUSIVE), None
    lower, upper = _bounds(d, level, delta, -1.0, 1.0) if bounds else (-1.0, 1.0)
    if bounds and margin:
        lower, upper = max(-1.0, lower - margin), min(1.0, upper + margin)
    # the grid's bounds, made exact at the two nulls the verdicts test
    lower, upper = (max(lower, 0.0) if fail_at else lower), (min(upper, delta) if pass_at else upper)
    return AnytimeResult(verdict, int(d.size), float(d.mean()) if d.size else 0.0, lower, upper, e_pass, e_fail,
                            min(1.0, 1.0 / e_pass), p_fail, pass_at, fail_at, futile, alpha, delta, margin)


def anytime_rate(outcomes, threshold: float, delta: float, alpha: float = 0.05, beta: float = 0.2, *,
                 bounds: bool = True) -> AnytimeResult:
    """Is the pass rate above ``threshold``? Anytime-valid.

    PASS: the rate is above the threshold (P(PASS | p <= threshold) <= alpha at any look);
    FAIL: below it (P(FAIL | p >= threshold) <= alpha). ``delta`` is the distance from the
    threshold the test is designed to detect quickly; it does not move the threshold.
    ``bounds=False`` leaves out the confidence bounds (``lower``/``upper`` are then 0 and 1),
    which cost a few hundred tests: for a run that re-tests after every trial.
    """
    threshold = check_open_unit("threshold", threshold)
    delta = check_open_unit("delta", delta)
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    x = _outcomes("outcomes", outcomes).astype(float)
    log_pass = _log_wealth(x[None, :], threshold, +1.0, delta, 0.0, 1.0)[0]
    log_fail = _log_wealth(x[None, :], threshold, -1.0, delta, 0.0, 1.0)[0]
    verdict, pass_at, fail_at, e_pass, e_fail, futile = _decide(log_pass, log_fail, alpha, beta)
    lower, upper = _bounds(x, alpha, delta, 0.0, 1.0) if bounds else (0.0, 1.0)
    lower, upper = (max(lower, threshold) if pass_at else lower), (min(upper, threshold) if fail_at else upper)
    return AnytimeResult(verdict, int(x.size), float(x.mean()) if x.size else 0.0, lower, upper, e_pass, e_fail,
                            min(1.0, 1.0 / e_pass), min(1.0, 1.0 / e_fail), pass_at, fail_at, futile, alpha, delta)


@dataclass(frozen=True)
class AnytimePlan:
    """Simulated operating characteristics of a test run until it decides.

    Trials are added one by one (after the ``prefix`` already seen, if any) until PASS, FAIL,
    or ``n_max`` trials in all: ``p_pass``, ``p_fail`` and ``p_open`` (no decision by
    ``n_max``) are the chances of each; ``expected_n`` is the mean trials in all at the stop
    (a run still open at ``n_max`` counts ``n_max``: with ``p_open`` above a few per cent it
    understates), ``median_n`` and ``q90_n`` its quantiles.
    """

    n_max: int
    reps: int
    p_pass: float
    p_fail: float
    p_open: float
    expected_n: float
    median_n: float
    q90_n: float


def _simulate(future: np.ndarray, prefix: np.ndarray, tests, alphas: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """First crossings (0: none) of the PASS and the FAIL test over each row of ``future``
    after ``prefix``, at levels ``alphas`` (PASS, FAIL). ``tests``: the (null, sign, low,
    high) of each, and the gain floor."""
    (pass_args, fail_args), floor = tests
    x = np.concatenate([np.broadcast_to(prefix, (future.shape[0], prefix.size)), future], axis=1)
    null, sign, low, high = pass_args
    tp = _first(_log_wealth(x, null, sign, floor, low, high) >= math.log(1.0 / alphas[0]))
    null, sign, low, high = fail_args
    tf = _first(_log_wealth(x, null, sign, floor, low, high) >= math.log(1.0 / alphas[1]))
    return tp, tf


def _plan(draw, prefix: np.ndarray, tests, alphas: tuple[float, float], n_max: int, reps: int) -> AnytimePlan:
    n_max = check_count("n_max", n_max, minimum=1)
    reps = check_count("reps", reps, minimum=1)
    if prefix.size > n_max:
        raise ValueError(f"n_max ({n_max}) must be at least the trials already seen ({prefix.size})")
    future = n_max - prefix.size
    pass_at = np.zeros(reps, dtype=int)
    fail_at = np.zeros(reps, dtype=int)
    chunk = max(1, min(reps, 4_000_000 // n_max))
    for lo in range(0, reps, chunk):
        hi = min(reps, lo + chunk)
        pass_at[lo:hi], fail_at[lo:hi] = _simulate(draw((hi - lo, future)), prefix, tests, alphas)
    big = n_max + 1
    tp = np.where(pass_at > 0, pass_at, big)
    tf = np.where(fail_at > 0, fail_at, big)
    t = np.minimum(tp, tf)
    decided = t <= n_max
    fail = decided & (tf <= tp)
    used = np.minimum(t, n_max)
    return AnytimePlan(n_max, reps, p_pass=float(np.mean(decided & ~fail)), p_fail=float(np.mean(fail)),
                       p_open=float(np.mean(~decided)), expected_n=float(used.mean()),
                       median_n=float(np.median(used)), q90_n=float(np.quantile(used, 0.9)))


def _pairs(rng: np.random.Generator, p_b: float, p_c: float, rho: float, size: tuple[int, int]) -> np.ndarray:
    """Differences b - c of Bernoulli pairs with marginals p_b, p_c and correlation rho
    (clipped to what the marginals allow), from the cells of their 2x2 table."""
    sd = math.sqrt(p_b * (1 - p_b) * p_c * (1 - p_c))
    p11 = p_b * p_c + rho * sd
    p11 = min(max(p11, max(0.0, p_b + p_c - 1.0)), min(p_b, p_c))
    u = rng.random(size)
    # u in [p11, p_b): the baseline alone passed (+1); in [p_b, p_b + p_c - p11): the candidate alone (-1)
    return ((u >= p11) & (u < p_b)).astype(float) - ((u >= p_b) & (u < p_b + p_c - p11)).astype(float)


def plan_anytime_regression(baseline_rate: float, drop: float, delta: float, alpha: float = 0.05, *, n_max: int,
                            correlation: float = 0.0, reps: int = 2000, seed=0, baseline=None,
                            candidate=None, fail_alpha: float | None = None, against=None) -> AnytimePlan:
    """Simulate :func:`anytime_regression` pair by pair: how many pairs it takes to decide, at
    a baseline pass rate, a true drop and a correlation within pairs; after the pairs already
    seen (``baseline``, ``candidate``) if given, so that the plan starts where the test is.
    ``fail_alpha``: the level the FAIL test is held to when it shares a multiple-testing
    family (default ``alpha``). ``against``: a stored baseline's outcomes in pair order; the
    plan then pairs simulated candidates with them (no more pairs than it has), which is
    what a run against that baseline meets: conditional on its outcomes, the trials to a
    decision can differ much from the average over baselines.

    This is the planning the gate's reasons and ``otel-assay plan`` quote: the rule actually
    applied, simulated, not a normal approximation of another test.
    """
    p_b = check_open_unit("baseline_rate", baseline_rate)
    delta = check_open_unit("delta", delta)
    alpha = check_open_unit("alpha", alpha)
    if not -1.0 <= correlation <= 1.0:
        raise ValueError(f"correlation must be in [-1, 1], got {correlation!r}")
    p_c = p_b - float(drop)
    if not 0.0 <= p_c <= 1.0:
        raise ValueError(f"baseline_rate - drop must be a rate in [0, 1], got {p_c!r}")
    prefix = np.zeros(0)
    if baseline is not None or candidate is not None:
        b, c = _outcomes("baseline", baseline), _outcomes("candidate", candidate)
        if b.size != c.size:
            raise ValueError(f"baseline and candidate must pair one to one, got {b.size} and {c.size} outcomes")
        prefix = b.astype(float) - c.astype(float)
    fail_alpha = alpha if fail_alpha is None else check_open_unit("fail_alpha", fail_alpha)
    rng = make_rng(seed)
    tests = (((delta, -1.0, -1.0, 1.0), (0.0, +1.0, -1.0, 1.0)), delta)
    if against is not None:
        stored = _outcomes("against", against).astype(float)[prefix.size:]
        n_max = min(n_max, prefix.size + stored.size)

        def draw(size):
            return stored[None, :size[1]] - (rng.random(size) < p_c)

        return _plan(draw, prefix, tests, (alpha, fail_alpha), n_max, reps)
    return _plan(lambda size: _pairs(rng, p_b, p_c, correlation, size), prefix, tests, (alpha, fail_alpha), n_max,
                 reps)


def plan_anytime_rate(rate: float, threshold: float, delta: float, alpha: float = 0.05, *, n_max: int,
                      reps: int = 2000, seed=0, outcomes=None) -> AnytimePlan:
    """Simulate :func:`anytime_rate` trial by trial at a true pass rate: how many trials it takes
    to decide; after the ``outcomes`` already seen, if given."""
    rate = check_open_unit("rate", rate)
    threshold = check_open_unit("threshold", threshold)
    delta = check_open_unit("delta", delta)
    alpha = check_open_unit("alpha", alpha)
    prefix = np.zeros(0) if outcomes is None else _outcomes("outcomes", outcomes).astype(float)
    rng = make_rng(seed)
    tests = (((threshold, +1.0, 0.0, 1.0), (threshold, -1.0, 0.0, 1.0)), delta)
    return _plan(lambda size: (rng.random(size) < rate).astype(float), prefix, tests, (alpha, alpha), n_max, reps)
