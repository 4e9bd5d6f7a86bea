"""The gate's JSON report: a documented, versioned document (schema: schemas/gate-report.v1.json).

Compatibility: ``schema_version`` changes its major number when a field is removed or
changes meaning; new optional fields may appear within a version, so readers must ignore
fields they do not know.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from .. import __version__

SCHEMA_VERSION = "1.3"
SCHEMA_ID = "https://otel-assay.dev/schemas/gate-report.v1.json"


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the report."""
    return json.loads((resources.files("otel_assay.report") / "schemas" / "gate-report.v1.json").read_text())


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null (JSON has neither), numpy scalars plain."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def report_dict(result) -> dict[str, Any]:
    """The report of a :class:`~otel_assay.gate.GateResult` as plain JSON data."""
    scenarios = []
    for r in result.scenarios:
        scenarios.append({
            "scenario": r.scenario,
            "verdict": r.verdict,
            "settings": {"threshold": r.settings.threshold, "delta": r.settings.delta, "beta": r.settings.beta},
            "baseline": r.baseline.as_dict() if r.baseline else None,
            "candidate": r.candidate.as_dict(),
            "checks": [{"name": c.name, "verdict": c.verdict, "gating": c.gating, "reason": c.reason,
                        "stats": c.stats} for c in r.checks],
        })
    return _clean({
        "$schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "otel-assay", "version": __version__},
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mode": result.mode,
        "decision": result.decision,
        "exit_code": result.exit_code,
        "reasons": list(result.reasons),
        "notes": list(result.notes),
        "config": result.config.as_dict(),
        "baseline": result.baseline,
        "candidate": result.candidate,
        "suite": result.suite,
        "scenarios": scenarios,
        "coverage": result.coverage,
        "family": result.family,
    })


def write_json(result, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report_dict(result), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
