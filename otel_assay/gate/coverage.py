"""The coverage check: the candidate's coverage against the configured minimum.

Below the minimum is INCONCLUSIVE (manual), never FAIL: low coverage says the trials saw
too little to deploy on, not that the candidate is worse.
"""

from __future__ import annotations

from typing import Any

from ..analyze.coverage import coverage_report, coverage_sets
from .config import GateConfig
from .result import INCONCLUSIVE, PASS, SKIPPED

def coverage_check(eng, table: str, cfg: GateConfig, use_minimum: bool) -> dict[str, Any]:
    rep = coverage_report(coverage_sets(eng, table), tools_available=cfg.coverage_tools or None,
                          models_target=cfg.coverage_models or None, state_lambda=cfg.state_lambda,
                          weights=cfg.coverage_weights)
    minimum = cfg.min_coverage if use_minimum else None
    if minimum is None and cfg.min_coverage is not None:
        # regress: the config has a minimum, which "none configured" would deny
        verdict, reason = SKIPPED, (f"regress does not judge coverage (min_coverage {cfg.min_coverage} is for "
                                    "gate): reported only")
    elif minimum is None:
        verdict, reason = SKIPPED, "no coverage minimum configured: reported only"
    elif rep.overall is None:
        verdict, reason = INCONCLUSIVE, ("coverage is undefined (every dimension n/a or weighted 0): declare "
                                         "coverage.tools or models, or check coverage.weights")
    elif rep.overall >= minimum:
        verdict, reason = PASS, f"coverage {rep.overall:.3f} >= minimum {minimum}"
    else:
        verdict, reason = INCONCLUSIVE, f"coverage {rep.overall:.3f} < minimum {minimum}"
    return {"overall": rep.overall, "minimum": minimum, "verdict": verdict, "reason": reason,
            "weights": rep.weights, "undefined": list(rep.undefined),
            "dimensions": [{"name": d.name, "value": d.value, "observed": d.observed, "denominator": d.denominator,
                            "sample_coverage": d.sample_coverage, "note": d.note} for d in rep.dimensions]}
