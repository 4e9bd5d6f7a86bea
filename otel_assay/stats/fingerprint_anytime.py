"""An anytime-valid fingerprint shift test: two-sample testing by betting on paired trials.

The Hotelling T² test of the fingerprint is right for one look. Users gate, add trials and
gate again; read at 10 such looks between 20 and 200 trials per version it blocks an
unchanged agent about four times as often as alpha. The test here is an e-process, a
running product of fair bets, like the pass-rate tests of ``anytime``: under "no shift" it
ever reaches 1/alpha with probability at most alpha, whatever the trial counts at which
anyone looks (docs/fingerprint-anytime.md has the simulated rates and power).

Construction. The i-th baseline trial and the i-th candidate trial form pair i (by trial
index when both versions ran the same indices, else in run order); trials beyond the
shorter arm wait for their partner.

1. Ranks. For each feature, both values of pair i are placed among the values of pairs
   1..i (both arms pooled) by their mid-rank u(x) = (#{v < x} + #{v = x} / 2) / 2i, and
   D_ij = u(c_ij) - u(b_ij). Only the order of values enters, so a token count with a
   tenfold outlier, a cost in dollars and a 0/1 error flag enter alike; equal values give
   D = 0 and bet nothing.
2. Scale. D_ij is divided by the largest |D_kj| of the earlier pairs k < i and clipped to
   [-1, 1]: a rare flag differs by about 1/2 on the pairs where it differs, and would
   otherwise be bet on at half strength.
3. One bet per feature and side. For an increase, wealth prod (1 + l_i g_ij) with g the
   scaled difference and l_i in [0, MAX_FRACTION] the growth-rate optimal size
   mean / (variance + mean²) of the earlier g's; for a decrease the same on -g.
4. The test's wealth is the mean over features of each feature's wealth: the bet on a
   worsening for a feature with a better side (``directions``; both sides, averaged, when
   ``block_improvements``), the average of both sides for a feature without one. FAIL when
   it reaches 1/alpha after any pair.

Why it is valid. The null hypothesis is exchangeability within each pair given the earlier
pairs: conditional on pairs 1..i-1 and on the unordered values {b_i, c_i}, the two orders
(b_i, c_i) and (c_i, b_i) are equally likely. That holds when the versions behave alike and
each trial's outcome does not depend on which version label it carries: i.i.d. trials of
one agent, paired trials that share an input, and a drift over time that both arms share
(pairs need not be alike, only each pair symmetric). It does not hold for a baseline
recorded in another run under other conditions (a different day's API, another model
snapshot): the pairs then differ by the runs, not the versions. Swapping b_i and c_i leaves
the values counted in step 1 unchanged (earlier pairs and the unordered pair) and flips the
sign of D_i; the scale, the bet sizes and which side each bet takes use earlier pairs only;
so each g_ij has conditional mean 0 and each payoff 1 + l_i g_ij conditional mean 1, and is
at least 1 - MAX_FRACTION > 0. Each feature's wealth is then a nonnegative martingale from
1, so is their mean, and by Ville's inequality the mean ever reaches 1/alpha with
probability at most alpha. The running maximum is valid: a FAIL reached at an earlier count
stays reached, and how often anyone gated makes no difference. The pairing order must not
depend on the features (trial index or run order are fine); when to stop adding trials may
depend on anything seen so far. A feature that was constant (all 0, such as a tool no trial
called yet) has D = 0 and bets nothing, so a tool column that appears later does not
change the wealth of the earlier pairs.

Direction. A feature with a better side bets only on getting worse (unless
``block_improvements``): an agent that only got cheaper or makes fewer errors gives no
wealth, so it does not block, and the guarantee above is untouched (the side is fixed before
any pair is seen). Each feature's two one-sided wealths are reported as ``e_up`` /
``e_down``, so the report says which features moved and which way: per feature and
uncorrected, for describing a shift, not for deciding one.

Why not one learned direction. Betting on <w_i, D_i> with w_i the mean difference of the
earlier pairs scaled by their covariance (one bet across all features, like T²) was tried:
learning a direction among 16 features from a few dozen pairs costs more than averaging 16
one-feature bets loses (log 16), and it detected nearly every simulated shift later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._common import Verdict, check_finite_array, check_open_unit

# the largest share of the wealth one pair can lose (as in the pass-rate tests: a bet that
# could lose everything would end the test on one unlucky pair; 0.5 detected every simulated
# shift later, 0.9 none sooner once differences are scaled)
MAX_FRACTION = 0.8
# the prior of a bet: no edge and the variance of a difference of two independent uniform
# ranks (1/6), with the weight of this many pairs (the bets hardly changed from 1 to 4)
PRIOR_PAIRS = 4.0
PRIOR_VARIANCE = 1.0 / 6.0


@dataclass(frozen=True)
class FeatureMove:
    """One feature's move from baseline to candidate, over the paired trials.

    ``direction``: "worse", "better", "neutral" (a feature with no better side) or "none" (no
    significant move); ``e_up`` / ``e_down`` are the largest wealth of the one-feature bets on
    an increase / a decrease; a move is significant when one reaches 1/alpha (per feature,
    uncorrected). ``mean_rank_shift``: mean of u(candidate) - u(baseline), in [-1, 1].
    """

    name: str
    baseline_mean: float
    candidate_mean: float
    mean_rank_shift: float
    e_up: float
    e_down: float
    direction: str


@dataclass(frozen=True)
class AnytimeShiftResult:
    """The anytime fingerprint shift test over the pairs seen so far.

    ``verdict``: FAIL when the wealth reached 1/alpha at some prefix of the pairs (before any
    multiplicity correction: a caller with several tests compares ``pvalue`` with its
    adjusted level); INCONCLUSIVE when there are too few pairs for any wealth to reach 1/alpha;
    else PASS (no shift so far; more trials may still find one, with the same guarantee).
    ``e_value`` is the largest wealth reached, ``pvalue`` = min(1, 1 / e_value) an anytime-valid
    p-value, ``fail_at`` the pair count at which the wealth first reached 1/alpha.
    """

    verdict: Verdict
    reason: str
    n_pairs: int
    e_value: float
    pvalue: float
    fail_at: int | None
    alpha: float
    block_improvements: bool
    features: tuple[FeatureMove, ...]


def _dense_ranks(v: np.ndarray) -> np.ndarray:
    """Ranks 0, 1, ... of the values along axis -2 (equal values, equal rank). Only the
    order of values matters to the test, so it runs on these integers."""
    order = np.argsort(v, axis=-2, kind="stable")
    s = np.take_along_axis(v, order, axis=-2)
    step = np.diff(s, axis=-2) > 0
    dense = np.concatenate([np.zeros_like(step[..., :1, :]), step], axis=-2).cumsum(axis=-2)
    ranks = np.empty_like(dense)
    np.put_along_axis(ranks, order, dense, axis=-2)
    return ranks


class _Counts:
    """How many values below a rank, for many columns at once (a Fenwick tree per column):
    the running mid-ranks cost O(log n) per pair instead of O(n)."""

    def __init__(self, columns: int, size: int):
        self.tree = np.zeros((columns, size + 1))
        self.rows = np.arange(columns)
        self.size = size

    def add(self, rank: np.ndarray) -> None:
        i = rank + 1
        while True:
            live = i <= self.size
            if not live.any():
                return
            np.add.at(self.tree, (self.rows[live], i[live]), 1.0)
            i = i + (i & -i)

    def below(self, rank: np.ndarray) -> np.ndarray:
        """Count of values with a rank < ``rank``."""
        out = np.zeros(len(self.rows))
        i = rank.copy()
        while True:
            live = i > 0
            if not live.any():
                return out
            out[live] += self.tree[self.rows[live], i[live]]
            i = i - (i & -i)


def rank_differences(baseline: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """D[..., i, j] = u(c_ij) - u(b_ij) for pairs in order, u the mid-rank among the values
    of pairs 1..i (both arms). ``baseline`` and ``candidate``: (..., n, d), row i of each
    forming pair i."""
    *batch, n, d = baseline.shape
    if n == 0:
        return np.zeros(baseline.shape)
    ranks = _dense_ranks(np.concatenate([baseline, candidate], axis=-2)).reshape(-1, 2 * n, d)
    rb = ranks[:, :n, :].transpose(0, 2, 1).reshape(-1, n)
    rc = ranks[:, n:, :].transpose(0, 2, 1).reshape(-1, n)
    counts = _Counts(rb.shape[0], 2 * n)
    out = np.empty(rb.shape)
    for i in range(n):
        b, c = rb[:, i], rc[:, i]
        mid_c = counts.below(c) + counts.below(c + 1)
        mid_b = counts.below(b) + counts.below(b + 1)
        # half the count of equal values, and the pair itself: it adds sign(c - b) to
        # count(c) - count(b); the 2 (i + 1) values counted are those of pairs 1..i
        out[:, i] = (0.5 * (mid_c - mid_b) + np.sign(c - b)) / (2.0 * (i + 1))
        counts.add(b)
        counts.add(c)
    return out.reshape(*batch, d, n).swapaxes(-1, -2) if batch else out.reshape(d, n).T


def _orientation(directions, d: int) -> tuple[np.ndarray, np.ndarray]:
    """+1 where an increase is worse or the feature has no better side, -1 where an increase
    is better; and which features have a better side."""
    if directions is None:
        return np.ones(d), np.zeros(d, dtype=bool)
    dirs = np.asarray(directions, dtype=float)
    if dirs.shape != (d,) or not np.all(np.isin(dirs, (-1.0, 0.0, 1.0))):
        raise ValueError(f"directions must hold -1, 0 or +1 for each of the {d} features")
    return np.where(dirs > 0, -1.0, 1.0), dirs != 0


def scaled_differences(diffs: np.ndarray) -> np.ndarray:
    """Each pair's rank difference divided by the largest magnitude the feature's difference
    had in the earlier pairs, clipped to [-1, 1] (the first pair's, and a feature's until it
    first differs, stay as they are). A rare 0/1 feature differs by about 1/2 on a discordant
    pair: unscaled, a bet of at most MAX_FRACTION could win at most 40 % on it, and an error
    rate going from .05 to .25 took 100 pairs to detect where the scaled one needs 50."""
    zero = np.zeros(diffs.shape[:-2] + (1, diffs.shape[-1]))
    scale = np.concatenate([zero, np.maximum.accumulate(np.abs(diffs), axis=-2)[..., :-1, :]], axis=-2)
    return np.where(scale > 0, np.clip(diffs / np.where(scale > 0, scale, 1.0), -1.0, 1.0), diffs)


def feature_log_wealth(scores: np.ndarray) -> np.ndarray:
    """log wealth after each pair of the one-feature bets on an increase (score > 0), for
    each feature of ``scores`` (..., n, d), each in [-1, 1]; the bets on a decrease are the
    same on -scores. The bet on pair i, l_i (score_i), uses pairs before i only: it is the
    growth-rate optimal size mean / (variance + mean²) of the earlier scores, with a prior
    of no edge and the variance of a difference of two independent uniform ranks."""
    n = scores.shape[-2]
    k = np.arange(n, dtype=float)[:, None]
    zero = np.zeros(scores.shape[:-2] + (1, scores.shape[-1]))
    s1 = np.concatenate([zero, np.cumsum(scores, axis=-2)[..., :-1, :]], axis=-2)
    s2 = np.concatenate([zero, np.cumsum(scores * scores, axis=-2)[..., :-1, :]], axis=-2)
    edge = s1 / (PRIOR_PAIRS + k)
    var = (PRIOR_PAIRS * PRIOR_VARIANCE + s2 - s1 * s1 / np.maximum(k, 1.0)) / (PRIOR_PAIRS + k)
    bet = np.clip(edge / (np.maximum(var, 1e-12) + edge * edge), 0.0, MAX_FRACTION)
    return np.cumsum(np.log1p(bet * scores), axis=-2)


def _wealths(xb: np.ndarray, xc: np.ndarray, directions, block_improvements: bool):
    """The test's log wealth after each pair (..., n); the one-feature bets' on a worsening
    and on an improvement (..., n, d) (on an increase and a decrease for a feature without a
    better side); the rank differences (..., n, d); the orientation."""
    orient, has_side = _orientation(directions, xb.shape[-1])
    diffs = rank_differences(xb, xc)
    scores = scaled_differences(diffs * orient)
    up, down = feature_log_wealth(scores), feature_log_wealth(-scores)
    # a mean of martingales is a martingale: the features' wealths are averaged
    per = np.where(has_side & (not block_improvements), up, np.logaddexp(up, down) - math.log(2.0))
    top = np.max(per, axis=-1, keepdims=True, initial=0.0)
    mixed = top[..., 0] + np.log(np.mean(np.exp(per - top), axis=-1))
    return mixed, up, down, diffs, orient


def shift_log_wealth(baseline, candidate, *, directions=None, block_improvements: bool = False) -> np.ndarray:
    """The test's log wealth after each pair, for arms of shape (..., n, d) (leading axes:
    independent repetitions, for simulations): FAIL at alpha after the first pair at which
    it reaches log(1 / alpha). Same arguments as :func:`anytime_shift`."""
    xb, xc = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    if xb.shape != xc.shape or xb.ndim < 2:
        raise ValueError(f"baseline and candidate must have one shape (..., pairs, features), got {xb.shape} "
                         f"and {xc.shape}")
    return _wealths(xb, xc, directions, block_improvements)[0]


def anytime_shift(baseline, candidate, *, alpha: float = 0.05, directions=None, block_improvements: bool = False,
                  feature_names=None) -> AnytimeShiftResult:
    """Did the fingerprint shift from baseline to candidate? Anytime-valid.

    ``baseline`` and ``candidate`` (trials x features) hold one fingerprint per trial, row i of
    each forming pair i (same trial index, or run order); the longer arm's extra rows wait for
    a partner and are not used. ``directions`` (-1 / 0 / +1 per feature: less is better /
    neither / more is better) makes the test bet on worsening and neutral moves only, unless
    ``block_improvements``. P(FAIL | no shift) <= alpha however many times this is called on
    growing prefixes of the same trials (see the module docstring for what "no shift" assumes).
    """
    alpha = check_open_unit("alpha", alpha)
    xb = check_finite_array("baseline", baseline)
    xc = check_finite_array("candidate", candidate)
    xb, xc = (a[:, None] if a.ndim == 1 else a for a in (xb, xc))
    if xb.ndim != 2 or xc.ndim != 2:
        raise ValueError("baseline and candidate must be 2-d arrays (trials x features)")
    if xb.shape[1] != xc.shape[1]:
        raise ValueError(f"baseline has {xb.shape[1]} features but candidate has {xc.shape[1]}")
    d = xb.shape[1]
    if d == 0:
        raise ValueError("baseline and candidate need at least one feature")
    names = tuple(f"feature_{j}" for j in range(d)) if feature_names is None else tuple(map(str, feature_names))
    if len(names) != d:
        raise ValueError(f"feature_names has {len(names)} names for {d} features")
    n = min(len(xb), len(xc))
    xb, xc = xb[:n], xc[:n]
    log_w, up, down, diffs, orient = _wealths(xb, xc, directions, block_improvements)
    thr = math.log(1.0 / alpha)
    peak = float(np.max(log_w, initial=0.0))
    reached = np.flatnonzero(log_w >= thr)
    fail_at = int(reached[0]) + 1 if reached.size else None
    e_value = math.exp(peak)
    has_side = _orientation(directions, d)[1]
    features = _moves(xb, xc, diffs, up, down, orient, has_side, names, thr)
    if fail_at:
        verdict = Verdict.FAIL
        moved = [f"{f.name} ({f.direction})" for f in features if f.direction != "none"]
        reason = (f"behaviour shifted: e={e_value:.3g} >= 1/alpha after {fail_at} of {n} pairs (p <= "
                  f"{1 / e_value:.3g}, anytime-valid); moved: {', '.join(moved) or 'no single feature alone'}")
    elif n * math.log1p(MAX_FRACTION) < thr:  # no wealth can grow faster than (1 + MAX_FRACTION)^n
        verdict = Verdict.INCONCLUSIVE
        reason = (f"too few pairs ({n}): no wealth reaches 1/alpha={1 / alpha:.3g} before "
                  f"{math.ceil(thr / math.log1p(MAX_FRACTION))} pairs")
    else:
        verdict = Verdict.PASS
        reason = f"no shift detected over {n} pairs: e={e_value:.3g} < 1/alpha={1 / alpha:.3g}"
    return AnytimeShiftResult(verdict, reason, n, e_value, min(1.0, 1.0 / e_value), fail_at, alpha,
                              bool(block_improvements), features)


def _moves(xb, xc, diffs, up, down, orient, has_side, names, thr) -> tuple[FeatureMove, ...]:
    """Each feature's move; ``up`` / ``down`` are the oriented bets (on a worsening and an
    improvement), turned back into bets on an increase and a decrease."""
    out = []
    for j, name in enumerate(names):
        worse, better = float(np.max(up[:, j], initial=0.0)), float(np.max(down[:, j], initial=0.0))
        inc, dec = (worse, better) if orient[j] > 0 else (better, worse)
        if max(inc, dec) < thr:
            way = "none"
        elif not has_side[j]:
            way = "neutral"
        else:
            way = "worse" if worse >= better else "better"
        means = [float(x[:, j].mean()) if len(x) else 0.0 for x in (xb, xc, diffs)]
        out.append(FeatureMove(name, *means, math.exp(inc), math.exp(dec), way))
    return tuple(out)
