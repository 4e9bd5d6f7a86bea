"""The one multiple-testing family of the gate's FAIL tests, corrected together.

One FAIL of any gating check in any scenario blocks, so the error rate to control is the
whole suite's: every check that can FAIL adds its p-values here, and ``correct`` adjusts
them all at once and settles each check with its adjusted values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .. import stats
from .config import CHECKS
from .result import Check


@dataclass
class _Hypothesis:
    """The FAIL side of one gating check: its p-values (several for a contracts check, one per
    contract) and ``finish``, which turns their adjusted values into the check's verdict."""

    check: Check
    pvalues: list[float]
    finish: Callable[[list[float]], None]


@dataclass
class Family:
    """Every FAIL test of the suite: all scenarios x all gating checks with a p-value.

    The gate blocks on a FAIL of any check in any scenario, so the family-wise error it must
    control is that of the whole suite: corrected check by check, k gating checks (regression
    and fingerprint by default) would falsely block an unchanged candidate at up to k alpha.
    A PASS needs every check of every scenario to PASS (an intersection-union test), so PASS
    needs no correction. Checks that are reported but do not gate (stability unless
    ``checks.stability`` is on, a baseline's share of a contract) and checks with no test
    (SKIPPED, or a fingerprint test that cannot reject at any data) stay out: they would
    cost power and could block nothing.
    """

    alpha: float
    method: str
    members: list[_Hypothesis] = field(default_factory=list)

    def add(self, check: Check, pvalues: list[float], finish: Callable[[list[float]], None]) -> None:
        self.members.append(_Hypothesis(check, [float(p) for p in pvalues], finish))

    @property
    def size(self) -> int:
        return sum(len(h.pvalues) for h in self.members)

    def level(self, size: int | None = None) -> float:
        """The level the smallest p-value of the family is held to (each p-value, for
        Bonferroni): alpha / m, and alpha / (m c(m)) for Benjamini-Yekutieli."""
        m = max(self.size if size is None else size, 1)
        if self.method == "none":
            return self.alpha
        if self.method == "by":
            return self.alpha / (m * sum(1.0 / j for j in range(1, m + 1)))
        return self.alpha / m

    def correct(self) -> dict[str, Any]:
        """Adjust every p-value within the one family, settle each check, and describe the family."""
        flat = [p for h in self.members for p in h.pvalues]
        adjusted = adjust(flat, self.method, self.alpha)
        i = 0
        for h in self.members:
            h.finish(adjusted[i:i + len(h.pvalues)])
            i += len(h.pvalues)
        tests: dict[str, int] = {}
        for h in self.members:
            tests[h.check.name] = tests.get(h.check.name, 0) + len(h.pvalues)
        controls = {"holm": "FWER", "bonferroni": "FWER", "bh": "FDR", "by": "FDR"}.get(self.method)
        return {"method": self.method, "alpha": self.alpha, "size": len(flat), "controls": controls,
                "tests": {name: tests[name] for name in CHECKS if name in tests}}

    def adjusted_tag(self) -> str:
        return "" if self.method == "none" or self.size <= 1 else "adjusted "

    def describe(self) -> str:
        """For reasons: the correction and the family it ran over."""
        return f"the {self.method} correction over the suite's {self.size} FAIL tests"


def adjust(pvalues: list[float], method: str, alpha: float) -> list[float]:
    if not pvalues:
        return []
    if method == "none":
        return list(pvalues)
    return [float(p) for p in stats.adjust_pvalues(pvalues, method=method, alpha=alpha).adjusted]
