"""Running the gate: open the lakes, select each arm's trials, run the checks, decide.

``_judge`` is the whole flow in order; each step is a short function below it.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import UsageError
from .arms import arm_trials, by_scenario, complete_trials, summary
from .config import CHECKS, GateConfig
from .coverage import coverage_check
from .decision import decide, suite_verdicts
from .family import Family
from .fingerprint import fingerprint_checks, fingerprint_tables
from .lakes import (check_has_trials, default_selectors, engines, lake_name, open_lake, same_path,
                    select)
from .oracles import Oracles, contract_tools, judge_oracles, oracle_checks, outcomes_from_contracts
from .pass_rate import pass_rate_checks, sprt_paths
from .regression import regression_checks
from .result import SKIPPED, Arm, Check, GateResult, ScenarioResult
from .stability import stability_checks, stability_scores


def run_gate(lake, config: GateConfig | None = None, *, baseline: str | None = None,
             candidate: str | None = None, baseline_lake=None, mode: str = "gate",
             progress: Callable[[str], None] | None = None) -> GateResult:
    """Judge ``candidate`` against ``baseline`` and decide deploy / block / manual.

    ``lake`` and ``baseline_lake`` are lake directories (or glob / file list, or an open
    :class:`~otel_assay.analyze.engine.Engine`). ``baseline`` / ``candidate`` are selectors
    ``key=value[,key=value]`` over the trials (version, scenario, run, model, outcome). With
    ``baseline_lake`` the baseline comes from that lake (a stored baseline reused across CI
    runs) and each selector defaults to all trials of its lake; otherwise, with no selectors,
    a lake holding exactly two versions compares the older (baseline) with the newer.

    ``mode="regress"`` ignores the coverage minimum (exploration); ``mode="verdict"`` judges
    the candidate alone against the threshold (see :func:`run_verdict`).

    Raises :class:`UsageError` (bad selector or setting, exit 3) and :class:`DataError`
    (empty or corrupt lake, no matching trials, exit 4).
    """
    cfg = config or GateConfig()
    alone = mode == "verdict"
    if alone and cfg.threshold is None and not any(o.get("threshold") for o in cfg.scenarios.values()):
        raise UsageError("a verdict needs a threshold: pass --threshold (e.g. 0.85) or set threshold in the config")
    if alone:
        cfg = copy.deepcopy(cfg)
        cfg.checks.update(regression=False, fingerprint=False, stability=False)
    if baseline_lake is not None and same_path(lake, baseline_lake):
        # two engines on one lake would take every trial for both arms (each selector defaults
        # to all trials of its lake) and skip the overlap check: read it as the one lake it is
        baseline_lake = None
    say = progress or _noop
    say("opening the lake")
    # the selections each lake will be read for, known before it opens: only their trials
    # are computed. Contracts and metamorphic relations read beyond the arms' trials (the
    # tools and scenarios a lake has seen, a follow-up's source trial): they read it all
    scoped = not (cfg.contracts or cfg.metamorphic)
    if baseline_lake is not None:
        eng_c = open_lake(lake, [candidate] if scoped else ())
        eng_b = open_lake(baseline_lake, [baseline] if scoped else ())
    else:
        eng_c = open_lake(lake, ([candidate] if alone else [baseline, candidate]) if scoped else ())
        eng_b = eng_c
    try:
        cand = _Side(eng_c, lake_name(lake), "candidate_trials", candidate)
        base = None if alone else _Side(eng_b, lake_name(lake if baseline_lake is None else baseline_lake),
                                        "baseline_trials", baseline)
        return _judge(cand, base, baseline_lake is not None, cfg, mode, say)
    finally:
        if isinstance(lake, (str, os.PathLike)):
            eng_c.close()
        if baseline_lake is not None and isinstance(baseline_lake, (str, os.PathLike)):
            eng_b.close()


def run_verdict(lake, config: GateConfig | None = None, *, select: str | None = None,
                progress: Callable[[str], None] | None = None) -> GateResult:
    """One version against the threshold θ: the pass-rate check alone, per scenario, with the
    suite verdict. Decision deploy = PASS, block = FAIL, manual = INCONCLUSIVE."""
    return run_gate(lake, config, candidate=select, mode="verdict", progress=progress)


@dataclass
class _Side:
    """One arm of the comparison as the gate builds it up: where its trials are, which were
    selected, and what was read about them."""

    eng: Any                     # the Engine of the arm's lake
    lake: str                    # the lake's name in messages and the report
    table: str                   # temp table holding the selected trace ids
    selector: str | None
    trials: int | None = None
    cols: dict[str, np.ndarray] = field(default_factory=dict)               # arms.arm_trials
    scenarios: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # cols per scenario
    stability: dict[str, dict[str, Any]] = field(default_factory=dict)
    oracles: Oracles | None = None
    conventions: list[str] = field(default_factory=list)  # the instrumentations that recorded the steps
    runs: list[str] = field(default_factory=list)         # the runs (assay.run.id) its trials came from

    def report(self) -> dict[str, Any]:
        return {"lake": self.lake, "selection": self.selector or "(all trials)", "trials": self.trials,
                "conventions": self.conventions, "runs": self.runs}


def _judge(cand: _Side, base: _Side | None, separate: bool, cfg: GateConfig, mode: str,
           say: Callable[[str], None]) -> GateResult:
    """The gate's flow. ``base`` is None for a verdict (the candidate alone); ``separate``
    when the baseline comes from a lake of its own."""
    notes: list[str] = []
    _select_trials(cand, base, separate, say)
    if cfg.contracts or cfg.metamorphic:
        _judge_oracles(cand, base, cfg, notes, say)
    _read_trials(cand, base, separate, cfg, notes)
    results = _scenario_results(cand, base, cfg, notes)
    # the FAIL tests of every gating check in every scenario, corrected as one family
    family = Family(cfg.alpha, cfg.correction)
    plots = _run_checks(results, cand, base, cfg, family, notes, say)
    family_info = family.correct()
    _order_checks(results, alone=base is None)
    plots["sprt"] = sprt_paths(results, cand.scenarios, cfg)
    coverage = None
    if base is not None:
        say("coverage")
        coverage = coverage_check(cand.eng, cand.table, cfg, use_minimum=(mode == "gate"))
    notes += _outcome_notes(results)
    suite = suite_verdicts(results)
    decision, reasons = decide(results, suite, coverage)
    return GateResult(mode=mode, config=cfg, baseline=None if base is None else base.report(),
                      candidate=cand.report(), scenarios=results, suite=suite, coverage=coverage,
                      decision=decision, reasons=reasons, notes=notes, plots=plots, family=family_info)


def _select_trials(cand: _Side, base: _Side | None, separate: bool, say: Callable[[str], None]) -> None:
    """Each arm's trials into its temp table; refuse arms that are empty or share trials."""
    say("computing trials")
    for eng in engines(cand.eng if base is None else base.eng, cand.eng):
        eng.materialize(["steps", "trials"])
    check_has_trials(cand.eng, cand.lake)
    if separate:
        check_has_trials(base.eng, base.lake)
    if base is not None:
        base.selector, cand.selector = default_selectors(cand.eng, base.selector, cand.selector, separate,
                                                         cand.lake)
    cand.trials = select(cand.eng, cand.selector, cand.table, cand.lake)
    if base is None:
        _one_version(cand)
        return
    base.trials = select(base.eng, base.selector, base.table, base.lake)
    if not separate:
        overlap = cand.eng.rows(f"SELECT count(*) FROM {cand.table} SEMI JOIN {base.table} USING (trace_id)")[0][0]
        if overlap:
            raise UsageError(f"the baseline ({base.selector}) and candidate ({cand.selector}) selections share "
                             f"{overlap} trials; make them disjoint (e.g. select different versions)")


def _one_version(cand: _Side) -> None:
    """A verdict is about one version: pooled versions would judge a pass rate of none of them."""
    versions = cand.eng.rows(f"SELECT version, count(*) FROM trials SEMI JOIN {cand.table} USING (trace_id) "
                             "GROUP BY version ORDER BY min(start_time_unix_nano), version")
    if len(versions) > 1:
        listing = ", ".join(f"{v} ({n} trials)" for v, n in versions)
        raise UsageError(f"the trials selected ({cand.selector or 'all trials'}) are of {len(versions)} versions: "
                         f"{listing}; a verdict judges one, so add version=... to --select "
                         "(e.g. --select version=" + f"{versions[-1][0]})")


def _judge_oracles(cand: _Side, base: _Side | None, cfg: GateConfig, notes: list[str],
                   say: Callable[[str], None]) -> None:
    """The configured contracts and relations on each arm's trials (the baseline's are reported only)."""
    say("contracts")
    tools = contract_tools(cand.eng, None if base is None else base.eng, cfg)
    cand.oracles = judge_oracles(cand.eng, cand.table, cfg, tools)
    if base is not None:
        base.oracles = judge_oracles(base.eng, base.table, cfg, tools, required=False)
        if base.oracles.missing:
            notes.append(f"metamorphic relations are judged on the candidate only, without the baseline's share "
                         f"alongside: {base.oracles.missing}")


def _read_trials(cand: _Side, base: _Side | None, separate: bool, cfg: GateConfig, notes: list[str]) -> None:
    """Each arm's trial columns, outcomes filled from contracts, per scenario, with stability."""
    cand.cols = arm_trials(cand.eng, cand.table)
    if base is not None:
        base.cols = arm_trials(base.eng, base.table)
    if separate:
        # a baseline lake that is a copy of the lake (or holds the candidate's trials) would
        # compare trials with themselves; within one lake _select_trials catches this
        shared = len(set(cand.cols["trace_id"].tolist()) & set(base.cols["trace_id"].tolist()))
        if shared:
            raise UsageError(f"the baseline ({base.lake}: {base.selector or 'all trials'}) and the candidate "
                             f"({cand.lake}: {cand.selector or 'all trials'}) share {shared} trials (the same "
                             "trace ids); select disjoint trials with --baseline / --candidate, or give a baseline "
                             "lake without the candidate's trials")
    sides = [cand] if base is None else [cand, base]
    if cfg.outcome_from_contracts:
        filled = sum(outcomes_from_contracts(side.cols, side.oracles, cfg) for side in sides)
        if filled:
            notes.append(f"{filled} trials without a recorded outcome took it from the contracts "
                         f"{', '.join(cfg.outcome_from_contracts)} (pass when all hold)")
    for side in sides:
        side.scenarios = by_scenario(side.cols)
        side.stability = stability_scores(side.eng, side.table, cfg.stability_floor)
        side.conventions = [r[0] for r in side.eng.rows(
            f"SELECT DISTINCT source_convention FROM steps SEMI JOIN {side.table} USING (trace_id) ORDER BY 1")]
        side.runs = [r[0] for r in side.eng.rows(
            f"SELECT DISTINCT run_id FROM trials SEMI JOIN {side.table} USING (trace_id) "
            "WHERE run_id IS NOT NULL ORDER BY 1")]
    notes += _unknown_operation_notes(sides)
    if base is not None and base.conventions != cand.conventions:
        notes.append(convention_note(base.conventions, cand.conventions))
    note = stored_baseline_note(base, cand)
    if note:
        notes.append(note)


# a baseline whose last trial started this long before the candidate's first is a stored one,
# not a run of the same job
STORED_AFTER_S = 3600


def stored_baseline_note(base: _Side | None, cand: _Side) -> str:
    """A baseline of one run recorded well before the candidate: the tests take the two arms'
    trials as draws from one setting, which holds in one job but not across days (a provider
    updates its model, a tool's API drifts), and one stored run cannot show how much runs vary."""
    if base is None or len(base.runs) != 1 or base.runs == cand.runs:
        return ""
    tb, tc = base.cols.get("start_time_unix_nano"), cand.cols.get("start_time_unix_nano")
    if tb is None or tc is None or not len(tb) or not len(tc):
        return ""
    gap_s = (float(np.min(tc)) - float(np.max(tb))) / 1e9
    if gap_s < STORED_AFTER_S:
        return ""
    hours = gap_s / 3600
    when = f"{hours:.0f} hours" if hours < 48 else f"{hours / 24:.0f} days"
    return (f"the baseline is one run ({base.runs[0]}) recorded {when} before the candidate: the tests assume "
            "nothing but the agent changed in between (not the provider's model, a tool's API, the load), and "
            "one run cannot show how much runs vary; run the baseline again in the same job to rule that out")


def convention_note(baseline: list[str], candidate: list[str]) -> str:
    """Two arms recorded by different instrumentations: which, and why that alone cannot block.

    Instrumentations wrap the same run in different container steps (a graph, a node, an
    agent), so a reader comparing step counts by hand would see a change where there is
    none; the fingerprint measures the work steps every instrumentation records alike."""
    def names(conv):
        return ", ".join(conv) or "no steps"
    return (f"the arms were recorded by different instrumentations: baseline {names(baseline)}, candidate "
            f"{names(candidate)}. They nest the same run in different container steps; the fingerprint "
            "compares the LLM calls, tool calls and answers every instrumentation records alike, so this "
            "difference alone does not block")


def _unknown_operation_notes(sides: list[_Side]) -> list[str]:
    """Spans whose operation name the step mapping does not know are no steps, so a trial
    made of them is an empty run, left out of the pass rates for a reason that is
    otel-assay's, not the agent's: say so, with the names, rather than let it pass silently."""
    n_spans = n_trials = n_empty = 0
    names: set[str] = set()
    for side in sides:
        counts = side.cols["n_unknown_ops"]
        unknown = counts > 0
        if not unknown.any():
            continue
        n_spans += int(counts.sum())
        n_trials += int(unknown.sum())
        n_empty += sum(c == "empty-run" for c in side.cols["error_class"][unknown])
        names.update(r[0] for r in side.eng.rows(
            f"SELECT DISTINCT op FROM spans SEMI JOIN {side.table} USING (trace_id) "
            "WHERE op IS NOT NULL AND NOT known_operation(op) ORDER BY op LIMIT 10"))
    if not n_spans:
        return []
    return [f"{n_spans} spans in {n_trials} trials have an operation name (gen_ai.operation.name) otel-assay "
            f"does not read as a step: {', '.join(sorted(names))}; {n_empty} of those trials have no LLM or tool "
            "step and count as empty runs, left out of the pass rates"]


def _scenario_results(cand: _Side, base: _Side | None, cfg: GateConfig, notes: list[str]) -> list[ScenarioResult]:
    """One result per scenario either arm ran, with each arm's counts and the scenario's settings."""
    results = []
    for sc in sorted(set(cand.scenarios) | set(base.scenarios if base else ())):
        arms = []
        for side in (cand, base):
            arm = None
            if side is not None:
                arm = summary(side.scenarios[sc], cfg.alpha) if sc in side.scenarios else Arm()
                arm.stability = side.stability.get(sc)
            arms.append(arm)
        results.append(ScenarioResult(sc, arms[1], arms[0], cfg.for_scenario(sc)))
    judged = {r.scenario for r in results}
    unknown_config = sorted(set(cfg.scenarios) - judged)
    if unknown_config:
        notes.append(f"config overrides for scenarios with no trials: {', '.join(unknown_config)}")
    for c in cfg.contracts:
        if c.scenarios and not set(c.scenarios) & judged:
            notes.append(f"contract {c.name!r} is scoped to scenarios with no trials ({', '.join(c.scenarios)}): "
                         "it judged nothing")
    return results


def _run_checks(results: list[ScenarioResult], cand: _Side, base: _Side | None, cfg: GateConfig, family: Family,
                notes: list[str], say: Callable[[str], None]) -> dict[str, Any]:
    """Every check of every scenario; FAIL tests join ``family``. Returns the plots' data."""
    plots: dict[str, Any] = {}
    say("pass rates")
    pass_rate_checks(results, cand.scenarios, cfg, family)
    if base is not None:
        say("regression tests")
        regression_checks(results, base.scenarios, cand.scenarios, cfg, family)
    if cand.oracles is not None:
        # before the fingerprints, whose permutation count depends on the family's size
        oracle_checks(results, None if base is None else base.oracles, cand.oracles, cfg, family)
    if base is None:
        return plots
    if any(r.settings.checks["fingerprint"] for r in results):
        say("fingerprints")
        fp_b, fp_c = fingerprint_tables(base.eng, cand.eng, base.table, cand.table)
        complete_b, left_b = complete_trials(base.scenarios)
        complete_c, left_c = complete_trials(cand.scenarios)
        if left_b or left_c:
            notes.append(f"fingerprint test leaves out trials that stopped before completing (interrupted, "
                         f"or a stream the caller stopped): {left_b} baseline, {left_c} candidate; their "
                         "behaviour is cut short, not changed")
        notes += fingerprint_checks(results, fp_b, fp_c, complete_b, complete_c, cfg, plots, say, family)
    stability_checks(results, cfg.stability_floor)
    return plots


def _order_checks(results: list[ScenarioResult], *, alone: bool) -> None:
    """The report's order of checks, whatever ran first; a verdict names a pass rate it skipped."""
    for r in results:
        r.checks.sort(key=lambda c: CHECKS.index(c.name))
    if alone:
        for r in results:
            if r.check("pass_rate") is None:
                why = ("no threshold for this scenario" if r.settings.checks["pass_rate"] else
                       "turned off for this scenario (checks.pass_rate: false in the config)")
                r.checks.append(Check("pass_rate", SKIPPED, why, gating=False))


def _outcome_notes(results: list[ScenarioResult]) -> list[str]:
    """Notes on the trials that some or every check could not use."""
    notes = []
    unknown = sum(r.candidate.counted - r.candidate.with_outcome for r in results) + sum(
        r.baseline.counted - r.baseline.with_outcome for r in results if r.baseline)
    if unknown:
        notes.append(f"{unknown} trials have no outcome: they are judged only by the checks that need none "
                     "(fingerprint, stability, coverage)")
    excluded: dict[str, int] = {}
    for r in results:
        for arm in (r.candidate, r.baseline):
            for k, v in (arm.excluded.items() if arm else ()):
                excluded[k] = excluded.get(k, 0) + v
    if excluded:
        notes.append("trials excluded from every check by error class: "
                     + ", ".join(f"{k} {v}" for k, v in sorted(excluded.items())))
    return notes


def _noop(_msg: str) -> None:
    pass
