"""The stability check: drift flags the candidate raises that the baseline did not.

The sub-scores are "look here" heuristics, not tests: new flags make the check
INCONCLUSIVE, never FAIL, and it gates only when ``checks.stability`` is on.
"""

from __future__ import annotations

from typing import Any

from .result import INCONCLUSIVE, PASS, Check, ScenarioResult

STABILITY_SCORES = ("tool_usage_stability", "response_consistency", "redundancy", "cost_per_progress")


def stability_scores(eng, table: str, floor: float) -> dict[str, dict[str, Any]]:
    cols = ", ".join(f"avg({s})" for s in STABILITY_SCORES)
    eng.materialize(["stability"])  # read once per arm; the view would score every trial each time
    out = {}
    for row in eng.rows(f"SELECT scenario, count(*), {cols}, avg(weakest_score), min(weakest_score), "
                        f"var_pop(weakest_score) FROM stability SEMI JOIN {table} USING (trace_id) "
                        f"WHERE scenario IS NOT NULL GROUP BY scenario"):
        means = dict(zip(STABILITY_SCORES, row[2:6]))
        out[row[0]] = {"trials": row[1], "means": means, "score": row[6], "weakest_score": row[7],
                       "variance": row[8], "flags": [k for k, v in means.items() if v is not None and v < floor]}
    return out


def stability_checks(results: list[ScenarioResult], floor: float) -> None:
    for r in results:
        c = r.candidate.stability
        if c is None:
            continue
        b = r.baseline.stability if r.baseline else None
        new = [f for f in c["flags"] if b is None or f not in b["flags"]]
        gating = r.settings.checks["stability"]
        st = {"floor": floor, "candidate_flags": c["flags"], "baseline_flags": b["flags"] if b else None,
              "new_flags": new, "candidate_score": c["score"], "baseline_score": b["score"] if b else None}
        if new:
            r.checks.append(Check("stability", INCONCLUSIVE, f"new drift flags below floor {floor}: "
                                  f"{', '.join(new)} (review the trials)", gating=gating, stats=st))
        else:
            r.checks.append(Check("stability", PASS, f"no new drift flags (floor {floor})", gating=gating, stats=st))
