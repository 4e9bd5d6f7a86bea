"""Wald's sequential probability ratio test on trial outcomes, as the AgentAssay paper adapts
it to agent testing, with its warm start from earlier trials.

H0: p >= theta (the agent is fine -> PASS) against H1: p <= theta - delta (it regressed ->
FAIL). After each trial the log-likelihood ratio log L(H1)/L(H0) moves down on a pass and up
on a failure; the test stops at a = log(beta / (1 - alpha)) (PASS) or b = log((1 - beta) /
alpha) (FAIL), so P(FAIL | H0) ~ alpha and P(PASS | H1) ~ beta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ._common import Verdict, bracketed_root, check_count, check_open_unit
from .proportions import verdict as fixed_sample_verdict

CONTINUE = "CONTINUE"


@dataclass(frozen=True)
class SPRTDesign:
    """Validated parameters and the derived per-trial steps and boundaries."""

    theta: float
    delta: float
    alpha: float
    beta: float
    n_max: int | None
    lower: float  # a: accept H0 -> PASS
    upper: float  # b: accept H1 -> FAIL
    step_pass: float  # log((theta - delta) / theta) < 0
    step_fail: float  # log((1 - theta + delta) / (1 - theta)) > 0


def sprt_design(theta: float, delta: float, alpha: float = 0.05, beta: float = 0.2,
                n_max: int | None = None) -> SPRTDesign:
    """Validate SPRT parameters and compute Wald's boundaries and the LLR steps."""
    theta = check_open_unit("theta", theta)
    delta = check_open_unit("delta", delta)
    alpha = check_open_unit("alpha", alpha)
    beta = check_open_unit("beta", beta)
    if not 0.0 < theta - delta:
        raise ValueError(f"theta - delta must be > 0 (theta={theta}, delta={delta})")
    if alpha + beta >= 1.0:
        raise ValueError(f"alpha + beta must be < 1 (alpha={alpha}, beta={beta})")
    if n_max is not None:
        n_max = check_count("n_max", n_max, minimum=1)
    p1 = theta - delta
    return SPRTDesign(
        theta, delta, alpha, beta, n_max,
        lower=math.log(beta / (1.0 - alpha)),
        upper=math.log((1.0 - beta) / alpha),
        step_pass=math.log(p1 / theta),
        step_fail=math.log((1.0 - p1) / (1.0 - theta)),
    )


@dataclass(frozen=True)
class SPRTState:
    """Where a sequential test stands.

    ``decision`` is PASS / FAIL (a boundary was crossed), CONTINUE (run more trials) or, once
    ``n_max`` trials ran without crossing, the fixed-sample verdict at truncation
    (``truncated=True``; ``fixed_sample`` holds the three-valued Wilson verdict). ``verdict``
    maps CONTINUE to INCONCLUSIVE for reporting.
    """

    decision: str
    llr: float
    n: int
    successes: int
    lower: float
    upper: float
    initial_llr: float
    truncated: bool
    fixed_sample: object | None
    design: SPRTDesign

    @property
    def verdict(self) -> Verdict:
        return Verdict.INCONCLUSIVE if self.decision == CONTINUE else Verdict(self.decision)

    @property
    def done(self) -> bool:
        return self.decision != CONTINUE


def _check_outcome(outcome) -> int:
    if isinstance(outcome, (bool, np.bool_)):
        return int(outcome)
    if isinstance(outcome, (int, np.integer, float, np.floating)) and outcome in (0, 1):
        return int(outcome)
    raise ValueError(f"outcome must be a pass (1/True) or a failure (0/False), got {outcome!r}")


class SPRT:
    """A sequential test you feed one trial outcome at a time.

    >>> test = SPRT(theta=0.9, delta=0.1, alpha=0.05, beta=0.1)
    >>> state = test.update(True)          # ... until state.done

    The LLR is recomputed from the counts (k passes in n trials) rather than accumulated, so
    a resumed test and a fresh one that saw the same trials agree to the last bit.

    ``n_max`` truncates the test: if trial ``n_max`` ends without a boundary crossing, the
    decision becomes the fixed-sample verdict (three-valued, Wilson at ``alpha``) on all trials
    against ``theta``. Truncation can only add errors where the SPRT would have continued, so
    the truncated test's P(FAIL | H0) is at most alpha + alpha/2 (and typically far less);
    :func:`sprt_operating_characteristics` gives the exact figures.

    Warm starts:
    - exact: :meth:`resume` replays earlier trials of the *same* agent version in order;
      the test is then the one you would have had running all along.
    - heuristic, opt-in: :meth:`with_beta_prior` (the AgentAssay paper's warm-start SPRT) — see
      its caveat.
    """

    def __init__(self, theta: float, delta: float, alpha: float = 0.05, beta: float = 0.2,
                 n_max: int | None = None, *, initial_llr: float = 0.0):
        self.design = sprt_design(theta, delta, alpha, beta, n_max)
        initial_llr = float(initial_llr)
        if not math.isfinite(initial_llr):
            raise ValueError(f"initial_llr must be finite, got {initial_llr!r}")
        self._initial = initial_llr
        self._n = 0
        self._k = 0
        self._path: list[float] = []
        self._decision = self._boundary_decision(initial_llr)
        self._fixed = None

    @classmethod
    def resume(cls, outcomes: Iterable, theta: float, delta: float, alpha: float = 0.05,
               beta: float = 0.2, n_max: int | None = None) -> "SPRT":
        """Warm start from earlier trials of the *same* agent version (exact).

        Replays the outcomes in the order they ran, stopping at the first boundary crossing,
        exactly as if the test had been running all along, so Wald's error bounds hold
        unchanged. Outcomes after the stopping point are not used (see ``state.n``).
        """
        test = cls(theta, delta, alpha, beta, n_max)
        for outcome in outcomes:
            if test._decision != CONTINUE:
                break
            test.update(outcome)
        return test

    @classmethod
    def with_beta_prior(cls, prior_successes: int, prior_n: int, theta: float, delta: float,
                        alpha: float = 0.05, beta: float = 0.2, n_max: int | None = None) -> "SPRT":
        """Warm start from a Beta prior built from earlier trials (the AgentAssay paper's
        warm-start SPRT). Opt-in.

        Starts the LLR at log[Beta(theta - delta; a0, b0) / Beta(theta; a0, b0)] with
        a0 = k0 + 1, b0 = n0 - k0 + 1. The normalising constants cancel, so this
        start is exactly the LLR of the k0 prior passes in n0 prior trials: the prior trials
        count as if they had been run now.

        Caveat: that is only sound when the prior trials come from the *same* version and
        the order they ran in did not already cross a boundary (use :meth:`resume` for the
        exact version). From another version the head start is someone else's evidence: the
        error bounds no longer hold, and can grow to alpha * exp(|initial_llr|) (the paper's
        own bound for a mis-calibrated prior) — e.g. x2.1 for 18/20 prior passes at
        theta = 0.9, delta = 0.1.
        """
        k0, n0 = check_count("prior_successes", prior_successes), check_count("prior_n", prior_n)
        if k0 > n0:
            raise ValueError(f"prior_successes must be <= prior_n ({n0}), got {k0}")
        design = sprt_design(theta, delta, alpha, beta, n_max)
        start = beta_prior_llr(k0 + 1, n0 - k0 + 1, theta, delta)
        return cls(design.theta, design.delta, design.alpha, design.beta, design.n_max, initial_llr=start)

    def _boundary_decision(self, llr: float) -> str:
        if llr <= self.design.lower:
            return Verdict.PASS.value
        if llr >= self.design.upper:
            return Verdict.FAIL.value
        return CONTINUE

    @property
    def llr(self) -> float:
        d = self.design
        return self._initial + self._k * d.step_pass + (self._n - self._k) * d.step_fail

    @property
    def path(self) -> np.ndarray:
        """The LLR after each trial (for plotting SPRT paths)."""
        return np.array(self._path)

    @property
    def state(self) -> SPRTState:
        d = self.design
        return SPRTState(self._decision, self.llr, self._n, self._k, d.lower, d.upper, self._initial,
                         self._fixed is not None, self._fixed, d)

    def update(self, outcome) -> SPRTState:
        """Record one trial (1/True = pass) and return the new state."""
        if self._decision != CONTINUE:
            raise ValueError(
                f"the test already decided {self._decision} after {self._n} trials; start a new test"
            )
        self._k += _check_outcome(outcome)
        self._n += 1
        llr = self.llr
        self._path.append(llr)
        self._decision = self._boundary_decision(llr)
        if self._decision == CONTINUE and self.design.n_max is not None and self._n >= self.design.n_max:
            self._fixed = fixed_sample_verdict(self._k, self._n, self.design.theta, self.design.alpha)
            self._decision = self._fixed.verdict.value
        return self.state

    def update_many(self, outcomes: Iterable) -> SPRTState:
        """Record trials until the outcomes run out or the test decides; extra outcomes after
        a decision are not used (``state.n`` says how many were)."""
        for outcome in outcomes:
            if self._decision != CONTINUE:
                break
            self.update(outcome)
        return self.state


def sprt_test(outcomes: Iterable, theta: float, delta: float, alpha: float = 0.05, beta: float = 0.2,
              n_max: int | None = None) -> SPRTState:
    """Run the SPRT over a sequence of outcomes (in the order the trials ran).

    Stops at the first boundary crossing (or at ``n_max``); returns the final state, whose
    ``decision`` is CONTINUE when the outcomes ran out first.
    """
    test = SPRT(theta, delta, alpha, beta, n_max)
    return test.update_many(outcomes)


def beta_prior_llr(a0: float, b0: float, theta: float, delta: float) -> float:
    """Starting LLR of the AgentAssay paper's warm-start SPRT: the log ratio of the Beta(a0, b0)
    density at H1's and at H0's pass rate,
    log Beta(theta - delta; a0, b0) - log Beta(theta; a0, b0)."""
    if not (a0 > 0 and b0 > 0):
        raise ValueError(f"a0 and b0 must be > 0, got a0={a0!r}, b0={b0!r}")
    d = sprt_design(theta, delta)
    return (a0 - 1.0) * d.step_pass + (b0 - 1.0) * d.step_fail


# --------------------------------------------------------------------------- Wald's ASN


def sprt_expected_n(theta: float, delta: float, alpha: float = 0.05, beta: float = 0.2, *, p: float) -> float:
    """Wald's approximate expected number of trials when the true pass rate is ``p``.

    E[N | p] = (L(p) a + (1 - L(p)) b) / E_p[lambda], with L(p) Wald's OC function (the
    probability of PASS) and E_p[lambda] the expected LLR step. At p = theta and at
    p = theta - delta this is the AgentAssay paper's expected sample size under H0 and H1.
    Note that the paper's H0 formula as printed divides a negative numerator by
    KL(H0 || H1) > 0; the expected step under H0 is -KL, so the ratio is positive.
    Wald's formula ignores the overshoot past the boundary, so the true mean is a little larger.

    The paper's SPRT example (theta = 0.9, delta = 0.1, alpha = 0.05, beta = 0.1): 54.4 under
    H0 (paper "~52") and 53.5 under H1 (paper "~34", which is wrong).
    """
    d = sprt_design(theta, delta, alpha, beta)
    p = check_open_unit("p", p)
    s, f, a, b = d.step_pass, d.step_fail, d.lower, d.upper
    drift = p * s + (1.0 - p) * f
    second = p * s * s + (1.0 - p) * f * f
    # OC function: h != 0 solves p e^{h s} + (1 - p) e^{h f} = 1, L = (e^{h b} - 1)/(e^{h b} - e^{h a}).
    # Near zero drift h ~ -2 drift / E[lambda^2] -> 0 and both the OC ratio and the numerator
    # below cancel catastrophically (p within 1e-6 of the zero-drift rate gave negative E[N]),
    # so there Wald's zero-drift limit E[N] = -a b / E[lambda^2] is used: it is exact to a
    # relative O(|h| (b - a)) < 1e-6. Elsewhere expm1 keeps g and L accurate for small h.
    h_guess = -2.0 * drift / second
    if abs(h_guess) * (b - a) < 1e-6:
        return -a * b / second
    g = lambda h: p * math.expm1(h * s) + (1.0 - p) * math.expm1(h * f)  # noqa: E731
    # g is convex with g(0) = 0 and g'(0) = drift: negative between 0 and the root, positive beyond
    near, far = 1e-3 * h_guess, 2.0 * h_guess
    while g(near) >= 0.0:
        near *= 0.5
    while g(far) <= 0.0:
        far *= 2.0
    h = bracketed_root(g, min(near, far), max(near, far), xtol=1e-300, rtol=1e-15)
    ea, eb = math.expm1(h * a), math.expm1(h * b)
    oc = eb / (eb - ea)
    return (oc * a + (1.0 - oc) * b) / drift


# --------------------------------------------------------------------------- exact OC


@dataclass(frozen=True)
class SPRTCharacteristics:
    """Exact operating characteristics of a (truncated) SPRT at true pass rate ``p``.

    ``prob_pass``/``prob_fail`` include verdicts reached at truncation; ``prob_inconclusive``
    is the mass that ended INCONCLUSIVE at ``n_max`` (or, untruncated, was still running
    after ``n_limit`` trials — below ``tol``).
    """

    p: float
    prob_pass: float
    prob_fail: float
    prob_inconclusive: float
    expected_n: float
    n_limit: int


def sprt_operating_characteristics(theta: float, delta: float, alpha: float = 0.05, beta: float = 0.2,
                                   *, p: float, n_max: int | None = None, tol: float = 1e-12,
                                   initial_llr: float = 0.0) -> SPRTCharacteristics:
    """Exact P(PASS), P(FAIL) and E[N] of the SPRT at true pass rate ``p``, by dynamic
    programming over (trials, passes) — no simulation, no overshoot approximation.

    Untruncated (``n_max=None``) it runs until less than ``tol`` probability is still
    undecided (at most 10^6 trials).
    """
    d = sprt_design(theta, delta, alpha, beta, n_max)
    p = check_open_unit("p", p)
    limit = d.n_max if d.n_max is not None else 1_000_000
    if not d.lower < initial_llr < d.upper:
        raise ValueError(f"initial_llr must lie strictly between the boundaries ({d.lower:.4g}, {d.upper:.4g})")
    prob = np.array([1.0])  # prob[j]: still running with k = k0 + j passes
    k0 = 0
    p_pass = p_fail = 0.0
    expected_n = 0.0
    n = 0
    while n < limit and prob.sum() > tol:
        expected_n += prob.sum()  # E[N] = sum_n P(N > n)
        n += 1
        new = np.zeros(prob.size + 1)
        new[:-1] += prob * (1.0 - p)
        new[1:] += prob * p
        k = k0 + np.arange(new.size)
        llr = initial_llr + k * d.step_pass + (n - k) * d.step_fail
        passed, failed = llr <= d.lower, llr >= d.upper
        p_pass += new[passed].sum()
        p_fail += new[failed].sum()
        new[passed | failed] = 0.0
        nz = np.flatnonzero(new)
        if nz.size == 0:
            prob = new[:0]
            break
        k0 += nz[0]
        prob = new[nz[0]: nz[-1] + 1]
    p_inc = float(prob.sum())
    if d.n_max is not None and n == d.n_max and p_inc > 0.0:
        p_inc = 0.0
        for j, mass in enumerate(prob):
            v = fixed_sample_verdict(int(k0 + j), n, d.theta, d.alpha).verdict
            if v is Verdict.PASS:
                p_pass += mass
            elif v is Verdict.FAIL:
                p_fail += mass
            else:
                p_inc += mass
    return SPRTCharacteristics(p, float(p_pass), float(p_fail), float(p_inc), float(expected_n), n)
