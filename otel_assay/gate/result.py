"""The gate's model objects: a check, an arm, a scenario's result and the gate's result.

Plain data: they never import a report. The reports (terminal, JSON, JUnit, HTML, OTel
events) read these objects, so a report format can change without touching the gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import stats
from ..errors import EXIT_BLOCK, EXIT_DEPLOY, EXIT_MANUAL
from .config import GateConfig, ScenarioSettings

PASS, FAIL, INCONCLUSIVE, SKIPPED = "PASS", "FAIL", "INCONCLUSIVE", "SKIPPED"
DECISION_EXIT = {"deploy": EXIT_DEPLOY, "block": EXIT_BLOCK, "manual": EXIT_MANUAL}


@dataclass
class Check:
    """One check of one scenario. ``gating`` False: reported, not part of the decision."""

    name: str
    verdict: str
    reason: str
    gating: bool = True
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class Arm:
    """One side (baseline or candidate) of one scenario."""

    trials: int = 0            # all trials of the scenario in the selection
    counted: int = 0           # trials the error classes do not exclude
    with_outcome: int = 0      # counted trials with a known outcome
    passes: int = 0
    excluded: dict[str, int] = field(default_factory=dict)   # error class -> trials
    rate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    stability: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"trials": self.trials, "counted": self.counted, "with_outcome": self.with_outcome,
                "passes": self.passes, "excluded": dict(self.excluded), "pass_rate": self.rate,
                "ci_low": self.ci_low, "ci_high": self.ci_high, "stability": self.stability}


@dataclass
class ScenarioResult:
    scenario: str
    baseline: Arm | None
    candidate: Arm
    settings: ScenarioSettings
    checks: list[Check] = field(default_factory=list)

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    @property
    def verdict(self) -> str:
        """The suite verdict of the scenario's gating checks; SKIPPED when none gates (all off,
        reported only or SKIPPED): the scenario is not part of the decision, and INCONCLUSIVE
        would say it holds back a deploy that the decision makes."""
        gating = [c.verdict for c in self.checks if c.gating and c.verdict != SKIPPED]
        if not gating:
            return SKIPPED
        return stats.suite_verdict(gating).verdict.value


@dataclass
class GateResult:
    """What the gate found and decided (otel_assay.report.json_report writes it as the JSON report)."""

    mode: str                          # gate | regress | verdict
    config: GateConfig
    baseline: dict[str, Any] | None    # {"lake", "selection", "trials"}
    candidate: dict[str, Any]
    scenarios: list[ScenarioResult]
    suite: dict[str, dict[str, Any]]   # check -> {"verdict", "pass", "fail", "inconclusive"}
    coverage: dict[str, Any] | None
    decision: str
    reasons: list[str]
    notes: list[str]
    plots: dict[str, Any] = field(default_factory=dict)   # data for the HTML plots only
    # the one multiple-testing family of the FAIL tests: {"method", "alpha", "size",
    # "controls" (FWER, FDR or None), "tests": check -> how many of its tests}
    family: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return DECISION_EXIT[self.decision]
