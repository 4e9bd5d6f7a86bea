"""Binomial acceptance bands for simulation tests: a correct implementation fails one of
these checks with probability <= 1e-4."""

from scipy.stats import binom

CONFIDENCE = 0.9999


def max_events(reps: int, rate: float) -> int:
    """Largest count of events a process with true rate <= ``rate`` exceeds with prob. <= 1e-4."""
    return int(binom.ppf(CONFIDENCE, reps, rate))


def min_events(reps: int, rate: float) -> int:
    """Smallest count a process with true rate >= ``rate`` falls below with prob. <= 1e-4."""
    return int(binom.ppf(1.0 - CONFIDENCE, reps, rate))
