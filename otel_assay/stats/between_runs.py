"""How much a version's pass rate varies from run to run, and the margin that variation needs.

Every trial of one run shares that run's conditions: the provider's model of the day, a
tool's latency, the load. If those move the pass rate from run to run (by a between-run SD
tau), two runs of an unchanged agent differ by more than their trials' binomial noise, and a
test that takes every trial as an independent draw from one pass rate reads that difference
as a change: with tau = .05 and 200 trials per version, the anytime drop test FAILs an
unchanged agent in about 15 % of gates at alpha = .05 (simulated). More trials do not help:
the run's shift is shared by all of them.

Several runs of the baseline show the variation. ``between_run_variance`` estimates tau^2
by the method of moments (DerSimonian-Laird on the runs' pass rates, each with the binomial
variance of the pooled rate over its trial count: the classic estimator of a beta-binomial's
extra variation): Cochran's Q of the run rates minus what binomial noise alone gives,
truncated at 0. ``run_margin`` turns it into the margin a mean paired drop must exceed:
under "the agent did not change" the drop's mean over pairs is the difference of the runs'
shifts, mean of the baseline's k runs minus the candidate's, with SD
tau sqrt(1/k + 1/k_candidate), and the margin is its one-sided 1 - level quantile, with the
Student t quantile of k - 1 degrees of freedom in place of the normal one: tau is estimated
from k runs, and with 3 the normal quantile let an unchanged agent FAIL 7 % of gates at
alpha = .05 (between-run SD .2, simulated), the t quantile 3 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtrit

from ._common import check_count, check_open_unit, check_positive


@dataclass(frozen=True)
class BetweenRuns:
    """The runs' pass rates and how much they vary beyond binomial noise.

    ``k`` runs; ``rate`` the pooled pass rate; ``q`` Cochran's Q of the run rates (about
    k - 1 when only binomial noise separates them); ``tau2`` the estimated between-run
    variance of the pass rate (0 when Q <= k - 1), ``tau`` its square root.
    """

    k: int
    rate: float
    q: float
    tau2: float
    tau: float

    def margin(self, level: float, k_candidate: int = 1) -> float:
        """The mean paired drop the runs' shifts alone exceed with probability ``level`` for an
        unchanged agent (a candidate of ``k_candidate`` runs): see :func:`run_margin`."""
        return run_margin(self.tau, self.k, level, k_candidate)


def between_run_variance(passes, trials) -> BetweenRuns:
    """The between-run variance of a pass rate from k >= 2 runs' (passes, trials).

    Runs are weighted by their trial counts (the binomial variance of a run's rate is
    rate (1 - rate) / trials, with the pooled rate, so that a run that passed every trial
    does not get a variance of 0 and an infinite weight).
    """
    x = np.asarray(passes, dtype=float)
    n = np.asarray(trials, dtype=float)
    if x.ndim != 1 or n.shape != x.shape:
        raise ValueError(f"passes and trials must be 1-d and of one length, got shapes {x.shape} and {n.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(n)) and np.all(x == np.round(x))
            and np.all(n == np.round(n))):
        raise ValueError("passes and trials must be whole counts")
    if x.size < 2:
        raise ValueError(f"the variance between runs needs at least 2 runs, got {x.size}")
    if np.any(n < 1) or np.any(x < 0) or np.any(x > n):
        raise ValueError("each run needs trials >= 1 and passes <= trials")
    k = int(x.size)
    rate = float(x.sum() / n.sum())
    if rate in (0.0, 1.0):  # every trial of every run alike: no variation to see
        return BetweenRuns(k, rate, 0.0, 0.0, 0.0)
    w = n / (rate * (1.0 - rate))
    y = x / n
    q = float(np.sum(w * (y - rate) ** 2))  # the weighted mean of the run rates is the pooled rate
    scale = float(w.sum() - np.sum(w * w) / w.sum())
    tau2 = max(0.0, (q - (k - 1)) / scale)
    return BetweenRuns(k, rate, q, tau2, math.sqrt(tau2))


def run_margin(tau: float, k_baseline: int, level: float, k_candidate: int = 1) -> float:
    """The drop the runs' shifts alone exceed with probability ``level`` (normal run effects):
    q(1 - level) tau sqrt(1/k_baseline + 1/k_candidate), q the Student t quantile with
    k_baseline - 1 degrees of freedom, since tau is estimated from k_baseline runs."""
    tau = check_positive("tau", tau, allow_zero=True)
    k_baseline = check_count("k_baseline", k_baseline, minimum=2)
    k_candidate = check_count("k_candidate", k_candidate, minimum=1)
    level = check_open_unit("level", level)
    return float(stdtrit(k_baseline - 1, 1.0 - level)) * tau * math.sqrt(1.0 / k_baseline + 1.0 / k_candidate)
