"""The decision: deploy, block or manual, from every scenario's checks and the coverage.

Block on any FAIL; deploy only when every gating check PASSes and coverage meets its
minimum; manual otherwise, with the open checks as the reasons.
"""

from __future__ import annotations

from typing import Any

from .. import stats
from .config import CHECKS
from .result import FAIL, INCONCLUSIVE, SKIPPED, ScenarioResult

def decide(results: list[ScenarioResult], suite: dict, coverage: dict | None) -> tuple[str, list[str]]:
    """Block on any FAIL; deploy when every gating check PASSes and coverage
    meets its minimum; manual otherwise."""
    fails = [f"{r.scenario}: {c.name} FAIL ({c.reason})" for r in results for c in r.checks
             if c.gating and c.verdict == FAIL]
    if fails:
        return "block", fails
    open_ = [f"{r.scenario}: {c.name} INCONCLUSIVE ({c.reason})" for r in results for c in r.checks
             if c.gating and c.verdict == INCONCLUSIVE]
    if coverage and coverage["verdict"] == INCONCLUSIVE:
        open_.append(f"coverage: {coverage['reason']}")
    if not suite:
        open_.append("no check ran (all disabled, or no outcomes and no baseline): nothing supports a deploy")
    if open_:
        return "manual", open_
    # a scenario whose checks are all off (or SKIPPED) passed nothing: say so, do not count it
    unjudged = [r.scenario for r in results if not any(c.gating and c.verdict != SKIPPED for c in r.checks)]
    n = len(results) - len(unjudged)
    reason = f"every check passed in {n} scenario{'s' if n != 1 else ''}"
    if unjudged:
        reason += (f"; {len(unjudged)} scenario{'s' if len(unjudged) != 1 else ''} had no check that gates: "
                   + ", ".join(unjudged[:10]) + (", ..." if len(unjudged) > 10 else ""))
    return "deploy", [reason]


def suite_verdicts(results: list[ScenarioResult]) -> dict[str, dict[str, Any]]:
    """Per check, the suite verdict over the scenarios where it gates, with the counts."""
    suite = {}
    for name in CHECKS:
        vs = [c.verdict for r in results for c in r.checks if c.name == name and c.gating and c.verdict != SKIPPED]
        if vs:
            sv = stats.suite_verdict(vs)
            suite[name] = {"verdict": sv.verdict.value, "pass": sv.n_pass, "fail": sv.n_fail,
                           "inconclusive": sv.n_inconclusive}
    return suite
