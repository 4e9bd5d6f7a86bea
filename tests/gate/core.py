"""The gate's statistical core on synthetic per-scenario data, for simulations that need
thousands of gate runs (a lake per run would take hours): the real check functions, family
and decision of otel_assay.gate, in the order ``run_gate`` calls them, without the lake."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from otel_assay.gate import CHECKS, SKIPPED, Arm, GateConfig, ScenarioResult
from otel_assay.gate.decision import decide
from otel_assay.gate.family import Family
from otel_assay.gate.fingerprint import fingerprint_checks
from otel_assay.gate.pass_rate import pass_rate_checks
from otel_assay.gate.regression import regression_checks


@dataclass
class Scenario:
    """One scenario's trials: outcomes (bool arrays) and fingerprints (trials x features)."""

    name: str
    outcomes_b: np.ndarray
    outcomes_c: np.ndarray
    fingerprints_b: np.ndarray
    fingerprints_c: np.ndarray


def _arm(outcomes: np.ndarray) -> Arm:
    n = len(outcomes)
    return Arm(trials=n, counted=n, with_outcome=n, passes=int(np.sum(outcomes)))


def _trials(outcomes: np.ndarray) -> dict[str, np.ndarray]:
    """An arm's trial columns as ``gate.arms.by_scenario`` gives them, in run order."""
    n = len(outcomes)
    return {"trial_index": np.arange(n), "counted": np.ones(n, dtype=bool),
            "passed": np.array([bool(o) for o in outcomes], dtype=object)}


def _table(scenarios: list[Scenario], side: str, features: list[str]) -> tuple[pa.Table, dict[str, tuple]]:
    """The fingerprint matrix (in trace id order, as the lake's is) and the complete trials
    as ``gate.arms.complete_trials`` gives them: trace id -> (trial index, run position)."""
    ids, names, rows, trials = [], [], [], {}
    for s in scenarios:
        x = getattr(s, f"fingerprints_{side}")
        # ids that do not sort in run order (trial 10 before trial 2), as random trace ids do not
        for i in range(len(x)):
            ids.append(f"{side}-{s.name}-{i}")
            trials[ids[-1]] = (i, i)
        names += [s.name] * len(x)
        rows.append(x)
    x = np.vstack(rows)
    order = np.argsort(ids, kind="stable")
    cols = {"trace_id": np.array(ids)[order], "scenario": np.array(names)[order],
            **{f: x[order, j] for j, f in enumerate(features)}}
    return pa.table(cols), trials


def judge(scenarios: list[Scenario], cfg: GateConfig,
          features: list[str] | None = None) -> tuple[str, list[ScenarioResult], dict]:
    """(decision, scenario results, the family) as ``run_gate`` would give them for these trials
    (no coverage minimum, no contracts). Trials pair by index when cfg.pairing is "auto".
    ``features``: the fingerprint columns' names (f0, f1, ... if not given: no feature has a
    better side)."""
    results = [ScenarioResult(s.name, _arm(s.outcomes_b), _arm(s.outcomes_c), cfg.for_scenario(s.name))
               for s in scenarios]
    family = Family(cfg.alpha, cfg.correction)
    arms_b = {s.name: _trials(s.outcomes_b) for s in scenarios}
    arms_c = {s.name: _trials(s.outcomes_c) for s in scenarios}
    pass_rate_checks(results, arms_c, cfg, family)
    regression_checks(results, arms_b, arms_c, cfg, family)
    if any(r.settings.checks["fingerprint"] for r in results):
        features = features or [f"f{j}" for j in range(scenarios[0].fingerprints_b.shape[1])]
        fp_b, counted_b = _table(scenarios, "b", features)
        fp_c, counted_c = _table(scenarios, "c", features)
        fingerprint_checks(results, fp_b, fp_c, counted_b, counted_c, cfg, {}, lambda _m: None, family)
    info = family.correct()
    suite = {name: True for name in CHECKS
             if any(c.name == name and c.gating and c.verdict != SKIPPED for r in results for c in r.checks)}
    decision, _ = decide(results, suite, None)
    return decision, results, info
