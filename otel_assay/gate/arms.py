"""Each arm's trials as numpy columns, per scenario: the counts every check starts from.

A trial counts unless its error class excludes it (infrastructure, pre-validation, empty
runs); a counted trial without an outcome is judged only by the checks that need none.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import stats
from .result import Arm


def arm_trials(eng, table: str) -> dict[str, np.ndarray]:
    t = eng.query(f"SELECT trace_id, scenario, run_id, trial_index, counted, passed, error_class, "
                  f"start_time_unix_nano, n_unknown_ops FROM trials SEMI JOIN {table} USING (trace_id) "
                  f"ORDER BY scenario, start_time_unix_nano, trace_id")
    cols = {name: t.column(name).to_numpy(zero_copy_only=False) for name in t.column_names}
    return cols


def by_scenario(cols: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Per-scenario views of an arm's trial columns (contiguous: sorted by scenario)."""
    sc = cols["scenario"]
    out = {}
    if len(sc) == 0:
        return out
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    ends = np.r_[starts[1:], len(sc)]
    for s, e in zip(starts, ends):
        out[str(sc[s])] = {k: v[s:e] for k, v in cols.items()}
    return out


def summary(t: dict[str, np.ndarray], alpha: float) -> Arm:
    counted = t["counted"].astype(bool)
    passed = t["passed"]
    known = counted & np.array([p is not None and p == p for p in passed], dtype=bool)
    passes = int(sum(bool(p) for p in passed[known]))
    excluded: dict[str, int] = {}
    for cls in t["error_class"][~counted]:
        excluded[str(cls)] = excluded.get(str(cls), 0) + 1
    arm = Arm(trials=len(counted), counted=int(counted.sum()), with_outcome=int(known.sum()), passes=passes,
              excluded=excluded)
    if arm.with_outcome:
        ci = stats.wilson_interval(passes, arm.with_outcome, alpha)
        arm.rate, arm.ci_low, arm.ci_high = ci.estimate, ci.low, ci.high
    return arm


# error classes of trials that stopped before completing without failing (assay.incomplete):
# Ctrl-C, a graph paused for a human, a stream its caller stopped (spelt as the trials view
# normalises error classes: "_" becomes "-")
INCOMPLETE_CLASSES = frozenset({"interrupted", "caller-stopped"})


def complete_trials(arms: dict[str, dict[str, np.ndarray]]) -> tuple[dict[str, tuple[Any, int]], int]:
    """The counted trials that ran to their end, as trace id -> (trial index, position in run
    order), and how many counted ones did not.

    Pass rates know an interrupted trial's outcome is unknown; its fingerprint would still
    enter the shift test as a run with fewer steps and tokens, so a candidate interrupted more
    often (a human pausing it, a UI stopping streams) would read as a behaviour shift. The
    index and run order are what the fingerprint test pairs trials by (the arms' columns come
    in run order: by start time)."""
    complete, left = {}, 0
    for a in arms.values():
        for pos, (t, k, cls, idx) in enumerate(zip(a["trace_id"], a["counted"], a["error_class"],
                                                   a["trial_index"])):
            if not k:
                continue
            if cls in INCOMPLETE_CLASSES:
                left += 1
            else:
                complete[str(t)] = (idx, pos)
    return complete, left


def _known(t: dict[str, np.ndarray]) -> np.ndarray:
    counted = t["counted"].astype(bool)
    return np.array([p is not None and p == p for p in t["passed"]], dtype=bool) & counted


def outcomes(t: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(trial_index, passed) of the counted trials with a known outcome, in run order."""
    known = _known(t)
    idx = t["trial_index"][known]
    return idx, np.array([bool(p) for p in t["passed"][known]], dtype=bool)


def outcome_runs(t: dict[str, np.ndarray]) -> np.ndarray:
    """The run of each trial :func:`outcomes` gives, as text ("" for a trial without a run id,
    which are taken as one run)."""
    runs = t.get("run_id")
    known = _known(t)
    if runs is None:
        return np.full(int(known.sum()), "", dtype=object)
    return np.array(["" if r is None else str(r) for r in runs[known]], dtype=object)


# ================================================================== checks
