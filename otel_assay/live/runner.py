"""Run an agent's trials, as few as the statistics allow.

:func:`run_suite` runs ``agent(scenario.input)`` once per trial under
:func:`otel_assay.trial` (so every trial is a trace in the lake), judges the output with the
scenario's evaluator, and per scenario:

- ``method: sprt`` feeds the outcomes, in trial-index order, to the anytime-valid test of
  the pass rate against the threshold (``stats.anytime_rate``, the test the gate's pass-rate
  check runs) and stops launching trials once it decides; at ``n_max`` the scenario stays
  INCONCLUSIVE. The test stays valid however often it is read, so stopping at the first
  decision, and resuming later, keep its error rates.
- ``method: fixed`` runs ``trials`` counted trials and gives the same test's verdict on them.
- ``method: adaptive`` runs ``calibration`` trials, computes the variance class and n* from
  their fingerprints (the AgentAssay paper's adaptive budget: a stable agent needs fewer
  trials) and runs up to n* trials (fixed-sample verdict).

Which trials count is what the lake's ``trials`` view says: infrastructure errors are
retried (``retries``, same trial index) and excluded; empty runs (no LLM call and
no tool step) are excluded; a timeout counts as a failure only when a tool call finished
before it. So the run's counts and the gate's counts agree.

Against a baseline: the trials of an SPRT scenario feed the gate's regression test instead,
paired by trial index with the baseline's. The baseline is either trials already in the lake
(``baseline``, a selector) or a second agent run in the same job (``baseline_agent`` as
``baseline_version``): then every trial index is launched for both agents side by side (the
order within the pair alternating), never one arm's trials after the other's, so whatever
drifts during the job (the provider's model or load, a tool's API, a rate limit) hits both
arms alike, and a stored baseline's run-to-run drift is out of the comparison. An index
reaches the test once both arms settled it. Both arms are recorded under their own version
with the job's one run id (the process's, or ``OTEL_ASSAY_RUN_ID``): the gate reads a shared
run id as "run in the same job" and says nothing about a stored baseline.

Resumption: before running, the trials already in the lake for (scenario, version) are
read back and replayed in index order (the test sees them as if they had just run); new trials
continue the index sequence. A scenario that already decided runs nothing. A run of both
versions resumes both arms, and only trials the two ran alongside (see
:func:`check_alongside`).

Parallelism: at most ``concurrency`` trials run at once over all scenarios. Sync agents run
in worker threads (the trial's context goes with them), async agents on the event loop.
A trial that outlives ``timeout`` is ended as a timeout; a sync agent's thread cannot be
killed and finishes in the background (its late tool calls do not make the timeout count:
the trials view looks only at tool calls that finished before the trial ended).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import math
import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import duckdb
import numpy as np

import otel_assay
from .. import semconv, settings
from ..analyze.engine import PRICES_ENV, open_engine, query_files
from ..analyze.select import Selection, SelectorError
from ..capture import _runtime
from ..capture.trial import Trial, classify_error, patch_threads
from ..errors import DataError, UsageError
from ..gate import GateConfig, run_gate
from ..gate.lakes import open_lake, select
from ..lake.files import Lake, LakeError
from ..gate.arms import arm_trials, by_scenario
from ..gate.family import Family
from ..gate.regression import pairs
from ..stats import Verdict, adaptive_budget, anytime_rate, anytime_regression, plan_anytime_rate
from .scenarios import RunConfig, Scenario, StepFacts, Suite

EXCLUDED_CLASSES = ("infrastructure", "pre-validation", "empty-run")
ATTEMPT_ATTR = "assay.trial.attempt"
REASON_ATTR = "assay.trial.reason"


# ================================================================== prices
_PRICES: list[tuple[str, float, float]] | None = None


def model_prices() -> list[tuple[str, float, float]]:
    """(model, input $/Mtok, output $/Mtok), longest model name first: the shipped
    ``model_prices`` table, or the CSV in $OTEL_ASSAY_PRICES (same columns)."""
    global _PRICES
    if _PRICES is None:
        con = duckdb.connect()
        csv = settings.prices()
        if csv:
            if not os.path.isfile(csv):
                raise UsageError(f"price table {csv} ({PRICES_ENV}) does not exist")
            rows = con.execute("SELECT lower(model), CAST(input_usd_per_mtok AS DOUBLE), "
                               "CAST(output_usd_per_mtok AS DOUBLE) FROM read_csv(?, header = true, "
                               "all_varchar = true)", [csv]).fetchall()
        else:
            con.execute(query_files()["model_prices"])
            rows = con.execute("SELECT lower(model), input_usd_per_mtok, output_usd_per_mtok "
                               "FROM model_prices").fetchall()
        con.close()
        _PRICES = sorted(rows, key=lambda r: -len(r[0]))
    return _PRICES


def price_of(model: str | None) -> tuple[float, float] | None:
    if not model:
        return None
    m = model.lower()
    for name, pin, pout in model_prices():
        if m == name or m.startswith(name + "-"):
            return pin, pout
    return None


# ================================================================== step facts per trace
from opentelemetry.sdk.trace import SpanProcessor as _SpanProcessor


class _StepCollector(_SpanProcessor):
    """A span processor that tallies each trial's steps, tool names and tokens as its spans
    end (so the runner knows without reading the lake back)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._facts: dict[int, StepFacts] = {}
        self._watch: set[int] = set()
        self.price_calls = False

    def watch(self, trace_id: int) -> None:
        with self._lock:
            self._watch.add(trace_id)
            self._facts[trace_id] = StepFacts()

    def take(self, trace_id: int) -> StepFacts:
        with self._lock:
            self._watch.discard(trace_id)
            return self._facts.pop(trace_id, StepFacts())

    def peek(self, trace_id: int) -> StepFacts:
        with self._lock:
            return self._facts.get(trace_id, StepFacts())

    def on_end(self, span) -> None:
        tid = span.context.trace_id
        if tid not in self._watch:
            return
        a = span.attributes or {}
        kind = a.get(semconv.ASSAY_STEP_KIND)
        if kind is None:
            op = a.get("gen_ai.operation.name")
            kind = {"chat": "llm", "text_completion": "llm", "generate_content": "llm",
                    "execute_tool": "tool", "invoke_agent": "agent"}.get(op)
        if kind is None:
            return
        with self._lock:
            f = self._facts.get(tid)
            if f is None:
                return
            f.n_steps += 1
            if kind in ("llm", "respond"):
                f.n_llm += 1
                tin = int(a.get(semconv.GEN_AI_USAGE_INPUT_TOKENS) or 0)
                tout = int(a.get(semconv.GEN_AI_USAGE_OUTPUT_TOKENS) or 0)
                f.input_tokens += tin
                f.output_tokens += tout
                if self.price_calls and (tin or tout):
                    model = a.get("gen_ai.response.model") or a.get("gen_ai.request.model")
                    price = price_of(model)
                    if price is None:
                        f.unpriced.append(str(model))
                    else:
                        f.cost_usd += (tin * price[0] + tout * price[1]) / 1e6
            elif kind == "tool":
                f.tools.append(str(a.get(semconv.GEN_AI_TOOL_NAME) or span.name))


_COLLECTOR: _StepCollector | None = None
_COLLECTOR_LOCK = threading.Lock()


def use_lake_or_refuse(lake) -> None:
    """Capture into ``lake`` from now on, or raise UsageError if spans already go elsewhere
    (the agent's module installed an OTLP pipeline on import): trials that never reach the
    lake could not be resumed, counted or gated."""
    otel_assay.capture.use_lake(lake)
    otel_assay.flush()
    p = _runtime.pipeline()
    if p is not None and p.kind != "parquet":
        raise UsageError(f"spans already go to the OTLP endpoint {p.target} (capture started before this "
                         f"command, with OTEL_EXPORTER_OTLP_ENDPOINT set), so trials would not reach {lake}; "
                         "unset OTEL_EXPORTER_OTLP_ENDPOINT or set OTEL_ASSAY_EXPORTER=parquet")


def step_collector() -> _StepCollector | None:
    """The process's collector, added to the capture pipeline's provider on first use."""
    global _COLLECTOR

    with _COLLECTOR_LOCK:
        if _COLLECTOR is None:
            p = _runtime.pipeline()
            if p is None:
                return None
            _COLLECTOR = _StepCollector()
            p.provider.add_span_processor(_COLLECTOR)
        return _COLLECTOR


# ================================================================== results
@dataclass
class TrialRecord:
    scenario: str
    index: int
    attempt: int
    passed: bool | None
    counted: bool
    error_class: str | None
    score: float | None = None
    reason: str | None = None
    duration_s: float = 0.0
    tokens: int = 0
    trace_id: str | None = None
    output: Any = None
    n_steps: int = 0
    n_tools: int = 0
    cost_usd: float = 0.0
    unpriced: list = field(default_factory=list)


def past_cap(needed: int | None, n: int, cfg: RunConfig) -> tuple[str, int] | None:
    """The setting that caps a scenario's counted trials, and its value (SPRT: n_max, trials
    when unset; a fixed sample: trials), when ``n + needed`` is past it: a rerun of the version
    resumes and stops there too, so the count cannot be reached as configured. None otherwise,
    and for adaptive (calibration sets its sample)."""
    if not needed:
        return None
    if cfg.method == "sprt":
        cap = ("n_max" if cfg.n_max is not None else "trials"), cfg.sprt_n_max
    elif cfg.method == "fixed":
        cap = "trials", cfg.trials
    else:
        return None
    return cap if n + needed > cap[1] else None


def more_trials_text(needed: int, n: int, cfg: RunConfig) -> str:
    """The manual-decision hint: about how many more trials would decide, and past the cap
    the setting to raise instead of a count a rerun cannot reach."""
    text = f"about {needed} more trials needed"
    past = past_cap(needed, n, cfg)
    if past is not None:
        key, value = past
        text += f", past {key} {value}: raise {key} to about {n + needed}"
    return text


@dataclass
class ScenarioRun:
    """Where one scenario stands. ``n``/``successes`` are the trials the decision used."""

    scenario: str
    config: RunConfig
    method: str
    decision: str = "CONTINUE"          # PASS / FAIL / INCONCLUSIVE / CONTINUE (running)
    n: int = 0
    successes: int = 0
    resumed: int = 0                    # counted trials reused from the lake
    ran: int = 0                        # trials run now (attempts, including excluded ones)
    excluded: int = 0                   # excluded trials run now (infrastructure, empty runs)
    retried: int = 0
    extra: int = 0                      # counted trials that finished after the decision
    e_pass: float = 1.0                 # sprt: the largest wealth of the PASS and FAIL tests
    e_fail: float = 1.0                 # (a test decides at 1 / alpha)
    stop_reason: str | None = None      # boundary | n_max | trials | budget | t_max | attempts
    target_n: int | None = None         # fixed / adaptive: trials to run
    variance_class: str | None = None   # adaptive
    ci_low: float | None = None
    ci_high: float | None = None
    more_trials_needed: int | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    records: list[TrialRecord] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.decision != "CONTINUE"

    @property
    def past_cap(self) -> tuple[str, int] | None:
        """The cap (setting, value) the trials still needed are past (see :func:`past_cap`)."""
        return past_cap(self.more_trials_needed, self.n, self.config)

    @property
    def verdict(self) -> Verdict:
        return Verdict.INCONCLUSIVE if self.decision == "CONTINUE" else Verdict(self.decision)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "scenario", "method", "decision", "n", "successes", "resumed", "ran", "excluded", "retried",
            "extra", "e_pass", "e_fail", "stop_reason", "target_n", "variance_class", "ci_low", "ci_high",
            "more_trials_needed", "tokens", "cost_usd")}


@dataclass
class RunResult:
    suite: str
    version: str
    lake: str
    scenarios: list[ScenarioRun]
    elapsed_s: float
    tokens: int
    gate: Any = None
    cost_usd: float = 0.0
    baseline_version: str | None = None     # the baseline version run alongside, if any
    baseline_scenarios: list[ScenarioRun] = field(default_factory=list)  # its trials per scenario

    @property
    def exit_code(self) -> int:
        if self.gate is not None:
            return self.gate.exit_code
        vs = [s.verdict for s in self.scenarios]
        if Verdict.FAIL in vs:
            return 1
        if Verdict.INCONCLUSIVE in vs:
            return 2
        return 0

    @property
    def decision(self) -> str:
        """The suite's verdict (PASS / FAIL / INCONCLUSIVE), or with --baseline the gate's
        decision (deploy / block / manual), which is what sets the exit code then."""
        if self.gate is not None:
            return self.gate.decision
        return {0: "PASS", 1: "FAIL", 2: "INCONCLUSIVE"}.get(self.exit_code, "?")

    def as_dict(self) -> dict[str, Any]:
        d = {"suite": self.suite, "version": self.version, "lake": self.lake, "elapsed_s": self.elapsed_s,
             "tokens": self.tokens, "cost_usd": self.cost_usd, "decision": self.decision, "exit_code": self.exit_code,
             "scenarios": [s.as_dict() for s in self.scenarios]}
        if self.baseline_version is not None:
            d["baseline"] = {"version": self.baseline_version,
                             "scenarios": [s.as_dict() for s in self.baseline_scenarios]}
        if self.gate is not None:
            d["gate"] = {"decision": self.gate.decision, "reasons": list(self.gate.reasons)}
        return d


# ================================================================== the lake: trials so far
def _has_span_files(lake: str) -> bool:
    """Whether the lake has span files yet; a LakeError if a directory of it cannot be listed
    (a run that resumed from part of the lake would repeat trials it has)."""
    return bool(Lake(lake).live_files("spans"))


def query_trials(lake: str, sql: str, params: list, why: str = "") -> list[tuple]:
    """Rows of ``sql`` over the lake's views; none for a lake without span files yet (no
    engine to start)."""
    try:
        if not _has_span_files(lake):
            return []
        eng = open_engine(lake, lambda e: e.materialize(["steps", "trials"]))
    except LakeError as e:
        raise DataError(f"cannot read the lake {lake}{why}: {e}") from None
    try:
        return eng.con.execute(sql, params).fetchall()
    finally:
        eng.close()


@dataclass(frozen=True)
class Against:
    """What a scenario's trials are tested against when the run gates on a baseline: the
    baseline's trials of the scenario (``gate.arms`` columns; when the run runs the baseline
    itself, its trials so far, filled in as they settle), and the gate's pairing, delta,
    alpha, beta and ``fail_level``: the level the gate's correction holds its strictest FAIL
    test to (alpha / m for Holm over at most m tests), below which the gate FAILs the test
    whatever the others' p-values."""

    trials: dict
    pairing: str
    delta: float
    alpha: float
    beta: float
    fail_level: float


def _family_size(gcfg: GateConfig, scenarios: list[str]) -> int:
    """The most FAIL tests the gate's family can hold for these scenarios (a bound: a check
    without a test, or a contract that judges nothing, stays out of the real family)."""
    m = 0
    for sc in scenarios:
        st = gcfg.for_scenario(sc)
        m += int(st.checks["regression"]) + int(st.checks["fingerprint"])
        m += int(st.checks["pass_rate"] and st.threshold is not None)
        if st.checks.get("contracts", True):
            m += sum(1 for c in gcfg.contracts if c.applies_to(sc))
        if st.checks.get("metamorphic", True):
            m += sum(1 for rel in gcfg.metamorphic if getattr(rel, "applies_to", lambda _s: True)(sc))
    return max(m, 1)


def _gate_against(gcfg: GateConfig, scenarios: list[str], arms: dict[str, dict]) -> dict[str, Against]:
    """What each of ``scenarios`` that has trials in ``arms`` (scenario -> baseline trial
    columns) is tested against, at the gate's settings for the scenario."""
    level = Family(gcfg.alpha, gcfg.correction).level(_family_size(gcfg, list(scenarios)))
    out = {}
    for sc in scenarios:
        if sc in arms:
            st = gcfg.for_scenario(sc)
            out[sc] = Against(arms[sc], gcfg.pairing, st.delta, gcfg.alpha, st.beta, level)
    return out


def check_baseline(lake: str, baseline: str, gcfg: GateConfig | None = None,
                   scenarios: list[str] = ()) -> dict[str, Against]:
    """A baseline the gate at the end could not use fails before any trial is paid for: a
    malformed selector is a usage error, one that matches no trial already in the lake a
    data error (the baseline's trials must be there before the candidate runs). Returns
    what each of ``scenarios`` that the baseline ran is tested against (with ``gcfg``)."""
    try:
        Selection.parse([baseline])
    except SelectorError as e:
        raise UsageError(f"baseline {baseline!r}: {e}") from None
    try:
        empty = not _has_span_files(lake)
    except LakeError as e:
        raise DataError(f"baseline {baseline}: {e}") from None
    if empty:
        raise DataError(f"baseline {baseline}: the lake {lake} has no trials yet, so there is nothing to compare "
                        "with; run the baseline version into this lake first")
    eng = open_lake(lake)
    try:
        eng.materialize(["steps", "trials"])
        select(eng, baseline, "baseline_trials", lake)
        arms = by_scenario(arm_trials(eng, "baseline_trials")) if gcfg is not None else {}
    finally:
        eng.close()
    if gcfg is None:
        return {}
    return _gate_against(gcfg, list(scenarios), arms)


def check_alongside(lake: str, version: str, baseline_version: str, scenarios: list[str]) -> None:
    """A run of both versions pairs trial i of one with trial i of the other because they ran
    side by side; stored trials of either version that the other did not run alongside (a
    baseline recorded yesterday, a candidate run alone) would pair across runs and bring back
    the drift the run is there to rule out. So the two versions' trials of each scenario must
    come from the same runs (none, or this job's earlier, interrupted, processes); otherwise
    a UsageError before any trial."""
    if version == baseline_version:
        raise UsageError(f"the baseline and the candidate are both version {version!r}: give the baseline arm "
                         "its own --baseline-version (trials of one version resume each other)")
    rows = query_trials(lake, "SELECT scenario, version, list(DISTINCT coalesce(run_id, '') ORDER BY 1) FROM trials "
                              "WHERE list_contains(?, version) AND list_contains(?, scenario) GROUP BY ALL",
                        [[version, baseline_version], scenarios], " to resume")
    runs = {(sc, v): tuple(r) for sc, v, r in rows}
    for sc in scenarios:
        b, c = runs.get((sc, baseline_version), ()), runs.get((sc, version), ())
        if set(b) != set(c):
            alone, other, extra = ((baseline_version, version, set(b) - set(c)) if set(b) - set(c) else
                                   (version, baseline_version, set(c) - set(b)))
            raise UsageError(
                f"scenario {sc!r}: the lake already has trials of version {alone!r} that version {other!r} did not "
                f"run alongside (run {', '.join(sorted(extra))}); a run of both versions "
                "pairs only trials run side by side, so it resumes only its own: give the baseline arm a version "
                f"new to this lake (e.g. --baseline-version {baseline_version}-rerun), or gate against the stored "
                f"trials with --baseline version={baseline_version}")


# a trial of the lake a run resumes from: (index, passed, counted, (steps, tool calls, tokens)),
# the last being what adaptive calibration measures of each trial
PriorTrial = tuple[int, "bool | None", bool, tuple[int, int, int]]


def existing_trials(lake: str, version: str, scenarios: list[str]) -> dict[str, list[PriorTrial]]:
    """Trials already in the lake for ``version``: scenario -> [PriorTrial] in index order, one
    entry per index (a counted attempt wins over excluded ones)."""
    out: dict[str, list[PriorTrial]] = {s: [] for s in scenarios}
    rows = query_trials(
        lake, "SELECT scenario, trial_index, passed, counted, n_steps, n_tool, "
              "coalesce(input_tokens, 0) + coalesce(output_tokens, 0) FROM trials "
              "WHERE version = ? AND trial_index IS NOT NULL AND list_contains(?, scenario) "
              "ORDER BY scenario, trial_index, counted DESC, start_time_unix_nano", [version, scenarios], " to resume")
    last: dict[str, int] = {}
    for sc, idx, passed, counted, n_steps, n_tool, tokens in rows:
        if last.get(sc) == idx:
            continue
        last[sc] = idx
        out[sc].append((int(idx), None if passed is None else bool(passed), bool(counted) and passed is not None,
                        (int(n_steps), int(n_tool), int(tokens))))
    return out


# ================================================================== per-scenario state machine
@dataclass
class _Arm:
    """One version's trials of a scenario: the candidate's, or the baseline's when the run
    runs both (its ``run`` then only counts: the candidate's decides)."""

    version: str
    agent: Callable[[Any], Any]
    is_async: bool
    run: ScenarioRun


class _ScenarioState:
    """A scenario's trials and its test. With ``base`` (the baseline version, its agent and
    its trials already in the lake) the run runs both versions: every trial index is
    launched for both, and an index reaches the test only once both arms' trials of it
    settled, so the regression test sees the two arms grow together."""

    def __init__(self, scenario: Scenario, prior: list[PriorTrial], against: Against | None = None,
                 cand: tuple[str, Callable, bool] = ("", None, False),
                 base: tuple[str, Callable, bool, list[PriorTrial]] | None = None):
        self.scenario = scenario
        cfg = scenario.config
        self.cfg = cfg
        self.run = ScenarioRun(scenario.name, cfg, cfg.method)
        self.cand = _Arm(cand[0], cand[1], cand[2], self.run)
        self.base: _Arm | None = None
        self.base_outcomes: dict[int, int] = {}  # the baseline's counted outcomes by index, in index order
        self.base_buffer: dict[int, TrialRecord | None] = {}
        both = list(prior)
        if base is not None:
            bversion, bagent, basync, bprior = base
            self.base = _Arm(bversion, bagent, basync, ScenarioRun(scenario.name, cfg, cfg.method))
            self.base_outcomes = {i: int(p) for i, p, c, _ in bprior if c}
            self.base.run.resumed = len(self.base_outcomes)
            both += bprior
        self.next_index = (max(t[0] for t in both) + 1) if both else 0
        self.sequential = cfg.method == "sprt"
        self.against = against
        self.outcomes: list[int] = []        # counted outcomes in index order (all of them)
        self.indices: list[int] = []         # their trial indices
        self.fed_upto = self.next_index      # indices below this are settled
        self.buffer: dict[int, TrialRecord] = {}
        self.calibration: list[list[float]] = []
        self.in_flight = 0
        prior_outcomes = [int(p) for _, p, c, _ in prior if c]
        self.indices = [i for i, _, c, _ in prior if c]
        self.run.resumed = len(prior_outcomes)
        if self.sequential:
            self.outcomes = prior_outcomes
            self._test()
            if self.run.done:
                self.run.stop_reason = "resumed"
        else:
            self.outcomes = prior_outcomes
            if cfg.method == "fixed":
                self.run.target_n = cfg.trials
            else:
                self.run.target_n = None  # set after calibration
                # a resumed run calibrates on the trials it resumes: it launched none past the
                # calibration count and judged the calibration sample alone, for ever
                self.calibration = [[*f, float(p)] for _, p, c, f in prior if c]
                if len(self.outcomes) >= cfg.calibration:
                    self._calibrate()
            self._check_fixed_done()

    # -------------------------------------------------------------- bookkeeping
    @property
    def counted(self) -> int:
        return len(self.outcomes)

    def _test(self) -> None:
        """The anytime-valid test over every counted outcome so far, in index order (it is
        valid read after each trial); decided, or at n_max, the scenario stops. Against a
        baseline it is the gate's regression test on the same pairs, FAILing only at the level
        the gate's correction holds its strictest test to, so that the gate agrees."""
        r, cfg = self.run, self.cfg
        r.n, r.successes = len(self.outcomes), int(sum(self.outcomes))
        if not self.outcomes:
            return
        if self.against is not None:
            mine = _arm_columns(self.indices, self.outcomes)
            theirs = self.against.trials if self.base is None else _arm_columns(self.base_outcomes,
                                                                                 self.base_outcomes.values())
            pb, pc, _how = pairs(theirs, mine, self.against.pairing)
            a = self.against
            res = anytime_regression(pb, pc, a.delta, a.alpha, a.beta, bounds=False)
            r.e_pass, r.e_fail = res.e_pass, res.e_fail
            decision = ("FAIL" if res.e_fail >= 1.0 / self.against.fail_level else
                        "PASS" if res.pass_at is not None and res.fail_at is None else None)
            if decision is None and len(pc) < r.n and self.base is None:
                # trials past the stored baseline's have nothing to pair with
                r.decision = "INCONCLUSIVE"
                r.stop_reason = r.stop_reason or "baseline"
                return
        else:
            res = anytime_rate(self.outcomes, cfg.threshold, cfg.delta, cfg.alpha, cfg.beta, bounds=False)
            r.e_pass, r.e_fail = res.e_pass, res.e_fail
            decision = None if res.verdict is Verdict.INCONCLUSIVE else res.verdict.value
        if decision is not None:
            r.decision = decision
            if r.stop_reason is None:
                r.stop_reason = "boundary"
        elif r.n >= cfg.sprt_n_max:
            r.decision = "INCONCLUSIVE"
            if r.stop_reason is None:
                r.stop_reason = "n_max"

    def _check_fixed_done(self) -> None:
        r = self.run
        r.n, r.successes = len(self.outcomes), int(sum(self.outcomes))
        if r.target_n is not None and r.n >= r.target_n:
            self._finish_fixed("trials")

    def _finish_fixed(self, reason: str) -> None:
        r = self.run
        outs = self.outcomes[: r.target_n] if r.target_n is not None else self.outcomes
        r.n, r.successes = len(outs), int(sum(outs))
        if r.n == 0:
            r.decision = "INCONCLUSIVE"
        else:
            # the test the gate's pass-rate check runs, so that a run and a gate on the same
            # trials say the same
            v = anytime_rate(outs, self.cfg.threshold, self.cfg.delta, self.cfg.alpha, self.cfg.beta, bounds=False)
            r.decision = v.verdict.value
            r.e_pass, r.e_fail = v.e_pass, v.e_fail
        r.stop_reason = reason

    def finalize(self, reason: str | None) -> None:
        """No more trials will run (budget, deadline, attempts): settle the verdict."""
        r = self.run
        if self.sequential:
            if not r.done:
                r.decision = "INCONCLUSIVE"
                r.stop_reason = reason
        elif not r.done:
            self._finish_fixed(reason or "trials")
        if r.n:
            outs = self.outcomes[: r.n]
            v = anytime_rate(outs, self.cfg.threshold, self.cfg.delta, self.cfg.alpha, self.cfg.beta)
            r.ci_low, r.ci_high = v.lower, v.upper
        if r.decision == "INCONCLUSIVE" and r.stop_reason != "baseline":
            r.more_trials_needed = self.more_needed()
        if self.base is not None:
            b = self.base.run
            outs = list(self.base_outcomes.values())
            b.n, b.successes, b.stop_reason = len(outs), int(sum(outs)), r.stop_reason
            b.decision = "INCONCLUSIVE"
            if outs:  # the baseline's own pass rate against the bar, as a fixed sample is judged
                v = anytime_rate(outs, self.cfg.threshold, self.cfg.delta, self.cfg.alpha, self.cfg.beta)
                b.decision, b.ci_low, b.ci_high = v.verdict.value, v.lower, v.upper
                b.e_pass, b.e_fail = v.e_pass, v.e_fail

    def more_needed(self) -> int:
        """Further trials a rerun would likely need: simulated from where the test stands, at
        the observed pass rate (the mean; a run still open at four times the trials so far,
        or 200, counts there)."""
        cfg, r = self.cfg, self.run
        p = (r.successes + 0.5) / (r.n + 1.0)
        p = min(max(p, 0.01), 0.99)
        n_max = max(200, 4 * r.n)
        plan = plan_anytime_rate(p, cfg.threshold, cfg.delta, cfg.alpha, n_max=n_max, reps=200, seed=0,
                                 outcomes=self.outcomes[: r.n])
        return max(1, int(math.ceil(plan.expected_n)) - r.n)

    def cap(self) -> int:
        """Counted trials the method may still use (beyond those settled)."""
        if self.sequential:
            return self.cfg.sprt_n_max
        if self.run.target_n is not None:
            return self.run.target_n
        return self.cfg.calibration

    def can_launch(self) -> bool:
        return not self.run.done and self.counted + self.in_flight < self.cap()

    def arms_of(self, index: int) -> list[_Arm]:
        """The arms to launch a trial index for, in launch order: with both versions, the
        baseline first at even indices and the candidate first at odd ones, so that neither
        is always the one that runs after the other (a warm cache, a rate limit's refill)."""
        if self.base is None:
            return [self.cand]
        return [self.base, self.cand] if index % 2 == 0 else [self.cand, self.base]

    # -------------------------------------------------------------- results
    def settle(self, arm: _Arm, index: int, rec: TrialRecord | None) -> None:
        """An arm's trial index is settled (counted or not, or ``None``: not run, the scenario
        stopped first); feed every index settled in every arm, in order."""
        (self.base_buffer if arm is self.base else self.buffer)[index] = rec
        while self.fed_upto in self.buffer and (self.base is None or self.fed_upto in self.base_buffer):
            # an index is in flight until it is fed: counted as settled before, a run of both
            # versions took a further index while the candidate's trials waited for the
            # baseline's, and ran its baseline trial past the decision
            self.in_flight -= 1
            r = self.buffer.pop(self.fed_upto)
            if self.base is not None:
                b = self.base_buffer.pop(self.fed_upto)
                if b is not None and b.counted and not self.run.done:
                    self.base_outcomes[b.index] = int(bool(b.passed))
            self.fed_upto += 1
            if r is None or not r.counted:
                continue
            if self.run.done:
                self.run.extra += 1
                continue
            self.outcomes.append(int(bool(r.passed)))
            self.indices.append(r.index)
            if self.sequential:
                self._test()
            else:
                self.calibration.append([r.n_steps, r.n_tools, r.tokens, float(bool(r.passed))])
                self._check_fixed_done()
                if self.cfg.method == "adaptive" and self.run.target_n is None and len(self.outcomes) >= self.cfg.calibration:
                    self._calibrate()

    def _calibrate(self) -> None:
        cal = np.array(self.calibration, dtype=float)
        # the budget's formula and variance classes assume features on a [0, 1] scale; steps,
        # tool calls and tokens are counts (tokens in the thousands gave 250,000 trials), so
        # each is divided by its largest value in the calibration sample
        top = cal.max(axis=0)
        cal = np.divide(cal, top, out=np.zeros_like(cal), where=top > 0)
        budget = adaptive_budget(cal, self.cfg.alpha, self.cfg.beta)
        self.run.variance_class = budget.variance_class
        self.run.target_n = max(budget.n_star, len(self.outcomes))
        self._check_fixed_done()


def _arm_columns(indices, outcomes) -> dict[str, np.ndarray]:
    """Counted trials as the gate's arm columns (``gate.arms``), for its pairing."""
    idx, outs = list(indices), [bool(o) for o in outcomes]
    return {"trial_index": np.array(idx, dtype=np.int64), "counted": np.ones(len(idx), dtype=bool),
            "passed": np.array(outs, dtype=object)}


# ================================================================== the run
def _call_agent_sync(agent, inp):
    result = agent(inp)
    if inspect.isawaitable(result):
        return asyncio.run(_await(result))
    return result


async def _await(x):
    return await x


def _is_async(agent) -> bool:
    return inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(getattr(agent, "__call__", None))


class _Budget:
    def __init__(self, t_max: float | None, tokens: int | None, dollars: float | None = None):
        self.start = time.monotonic()
        self.deadline = None if t_max is None else self.start + t_max
        self.tokens_max = tokens
        self.tokens = 0
        self.dollars_max = dollars
        self.dollars = 0.0

    def exhausted(self) -> str | None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "t_max"
        if self.tokens_max is not None and self.tokens >= self.tokens_max:
            return "budget"
        if self.dollars_max is not None and self.dollars >= self.dollars_max:
            return "budget"
        return None


def run_suite(suite: Suite, agent: Callable[[Any], Any], *, version: str, lake: str,
              concurrency: int | None = None, timeout: float | None = None, retries: int | None = None,
              t_max: float | None = None, budget_tokens: int | None = None,
              budget_dollars: float | None = None, resume: bool = True,
              scenarios: list[str] | None = None, method: str | None = None,
              progress: Callable[[list[ScenarioRun]], None] | None = None,
              baseline: str | None = None, gate_config: Any = None,
              baseline_agent: Callable[[Any], Any] | None = None, baseline_version: str | None = None) -> RunResult:
    """Run ``suite`` against ``agent`` (sync or async callable of the scenario input) as
    ``version``, writing trials to the lake at ``lake``; see the module docstring.

    Keyword overrides win over the suite's config. ``progress`` is called with the scenario
    states after every settled trial. With ``baseline`` (a selector such as ``version=v1``)
    the gate judges this version against it at the end (``result.gate``). With
    ``baseline_agent`` and ``baseline_version`` the run runs that agent too, as that
    version, trial index by trial index alongside this one, and the gate judges this
    version against those trials at the end.
    """
    if not callable(agent):
        raise UsageError("the agent must be a callable taking the scenario input")
    if not version:
        raise UsageError("a version is required (--version): trials of the same version resume each other")
    if (baseline_agent is None) != (not baseline_version):
        raise UsageError("a baseline run alongside needs both its agent (--baseline-agent) and its version "
                         "(--baseline-version)")
    if baseline_agent is not None:
        if baseline:
            raise UsageError(f"give either --baseline {baseline} (trials already in the lake) or --baseline-agent "
                             "(run the baseline alongside), not both")
        if not callable(baseline_agent):
            raise UsageError("the baseline agent must be a callable taking the scenario input")
        baseline = f"version={baseline_version}"
        try:
            Selection.parse([baseline])
        except SelectorError as e:
            raise UsageError(f"--baseline-version {baseline_version!r}: {e}") from None
    selected = suite.scenarios
    if scenarios:
        names = {s.name for s in suite.scenarios}
        missing = [s for s in scenarios if s not in names]
        if missing:
            raise UsageError(f"no scenario {missing[0]!r} in {suite.source}; it has {', '.join(sorted(names))}")
        selected = [s for s in suite.scenarios if s.name in scenarios]
    if method is not None:
        selected = [Scenario(s.name, s.input, s.properties, s.evaluator, replace(s.config, method=method))
                    for s in selected]
    cfg = suite.config
    conc = concurrency or cfg.concurrency or 1
    budget = _Budget(t_max if t_max is not None else cfg.t_max,
                     budget_tokens if budget_tokens is not None else cfg.budget_tokens,
                     budget_dollars if budget_dollars is not None else cfg.budget_dollars)
    if budget.dollars_max is not None:
        model_prices()  # fail early on a bad price table

    if _runtime.disabled():
        raise UsageError("capture is disabled (OTEL_ASSAY_DISABLED): trials would not reach the lake")
    gcfg = None
    against: dict[str, Against] = {}
    names = [s.name for s in selected]
    if baseline:
        gcfg = gate_config or GateConfig(alpha=cfg.alpha, beta=cfg.beta, delta=cfg.delta, threshold=cfg.threshold,
                                         source=f"{suite.source} (config)")
        if baseline_agent is None:
            against = check_baseline(lake, baseline, gcfg, names)
        else:
            check_alongside(lake, version, baseline_version, names)
            against = _gate_against(gcfg, names, {n: _arm_columns([], []) for n in names})
    use_lake_or_refuse(lake)
    prior = existing_trials(lake, version, names)
    bprior = existing_trials(lake, baseline_version, names) if baseline_agent is not None else {}
    cand = (version, agent, _is_async(agent))
    states = []
    for s in selected:
        got, bgot = prior.get(s.name, []), bprior.get(s.name, [])
        base = None if baseline_agent is None else (
            baseline_version, baseline_agent, _is_async(baseline_agent), bgot if resume else [])
        st = _ScenarioState(s, got if resume else [], against.get(s.name), cand, base)
        if not resume and (got or bgot):  # start fresh, but never reuse a trial index of this version
            st.next_index = st.fed_upto = max(t[0] for t in got + bgot) + 1
        states.append(st)
    collector = step_collector()
    if collector is not None:
        collector.price_calls = budget.dollars_max is not None or collector.price_calls
    patch_threads()
    started = time.monotonic()
    asyncio.run(_run_all(states, conc, timeout, retries, budget, collector, progress))
    otel_assay.flush()
    for st in states:
        st.finalize(budget.exhausted() or ((_never_counts(st) or "attempts") if not st.run.done else None))
    if progress:
        progress([s.run for s in states])
    result = RunResult(suite.name, version, str(lake), [s.run for s in states], time.monotonic() - started,
                       budget.tokens, cost_usd=budget.dollars)
    if baseline_agent is not None:
        result.baseline_version = baseline_version
        result.baseline_scenarios = [s.base.run for s in states]
    if baseline:
        result.gate = run_gate(lake, gcfg, baseline=baseline, candidate=f"version={version}")
    return result


class _DaemonThreads(concurrent.futures.Executor):
    """Each call in a new daemon thread. A sync agent's trial that outlives its timeout cannot
    be killed: in a ThreadPoolExecutor it kept its worker, so a few hung trials left later
    ones queued until they timed out unrun, and the pool's threads are joined at interpreter
    exit, so `otel-assay run` never exited after an agent hung (its verdict printed, the CI
    job stuck). A daemon thread is left behind instead; at most ``concurrency`` trials run at
    once all the same (the runner's semaphore)."""

    def submit(self, fn, /, *args, **kwargs):
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def work():
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting trial, as a pool does
                fut.set_exception(e)

        threading.Thread(target=work, name="otel-assay-trial", daemon=True).start()
        return fut


async def _run_all(states, conc, timeout, retries, budget, collector, progress):
    sem = asyncio.Semaphore(conc)
    pool = _DaemonThreads()
    try:
        await asyncio.gather(*[
            _run_scenario(st, sem, pool, timeout, retries, budget, collector, progress, states) for st in states])
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


async def _run_scenario(st: _ScenarioState, sem, pool, timeout, retries, budget, collector, progress, states):
    cfg = st.cfg
    timeout = timeout if timeout is not None else cfg.timeout
    retries = retries if retries is not None else cfg.retries
    pending: dict[asyncio.Task, tuple[_Arm, int]] = {}
    queue: list[tuple[_Arm, int]] = []  # the arms' trials of the last index taken, not launched yet
    attempts = 0
    while True:
        while budget.exhausted() is None and not _never_counts(st) and not st.run.done:
            if not queue:
                # excluded trials (empty runs) must not loop forever; the cap is read each time,
                # for an adaptive run sets it after calibration (fixed before, it stopped every
                # first run at 3 x calibration + 10)
                if not (st.can_launch() and attempts < 3 * st.cap() + 10):
                    break
                idx = st.next_index
                st.next_index += 1
                st.in_flight += 1
                attempts += 1
                queue = [(arm, idx) for arm in st.arms_of(idx)]
            if sem.locked() and pending:
                break  # let our own trials finish first: their outcomes may end the test
            await sem.acquire()
            if budget.exhausted() is not None:
                sem.release()
                break
            arm, idx = queue.pop(0)
            task = asyncio.create_task(_one_index(st, arm, idx, sem, pool, timeout, retries, budget, collector))
            pending[task] = arm, idx
        if queue and (budget.exhausted() is not None or _never_counts(st) or st.run.done):
            for arm, idx in queue:  # the scenario stopped between an index's two trials
                st.settle(arm, idx, None)
            queue = []
        if not pending:
            break
        done, _ = await asyncio.wait(pending, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            arm, idx = pending.pop(t)
            st.settle(arm, idx, t.result())
            if progress:
                progress([s.run for s in states])


def _never_counts(st: _ScenarioState, limit: int = 5) -> str | None:
    """The stop reason when an arm's first ``limit`` trials were all excluded the same way,
    so more would be too: ``empty-runs`` (the agent records no steps: not instrumented) or
    ``timeouts`` (every trial times out before any tool call: --timeout too short), prefixed
    ``baseline`` for the baseline agent run alongside (the candidate's trials may count)."""
    arms = [("", st.run.records, st.counted)]
    if st.base is not None:
        arms.append(("baseline ", st.base.run.records, len(st.base_outcomes)))
    for who, recs, counted in arms:
        if counted or len(recs) < limit or any(r.counted for r in recs):
            continue
        if all(r.error_class == "empty-run" for r in recs):
            return who + "empty-runs"
        if all(r.error_class == "timeout" and not r.counted for r in recs):
            return who + "timeouts"
    return None


async def _one_index(st, arm: _Arm, idx, sem, pool, timeout, retries, budget, collector):
    run = arm.run
    try:
        attempt = 0
        while True:
            rec = await _one_trial(st, idx, attempt, arm.agent, arm.is_async, arm.version, pool, timeout, collector)
            run.ran += 1
            run.tokens += rec.tokens
            budget.tokens += rec.tokens
            budget.dollars += rec.cost_usd
            run.cost_usd += rec.cost_usd
            if budget.dollars_max is not None and rec.unpriced:
                raise UsageError(f"a dollar budget is set but model {rec.unpriced[0]!r} has no price; add it to a "
                                 "price CSV (OTEL_ASSAY_PRICES) or budget in tokens instead")
            run.records.append(rec)
            if not rec.counted:
                run.excluded += 1
            if rec.error_class == "infrastructure" and attempt < retries and budget.exhausted() is None:
                attempt += 1
                run.retried += 1
                await asyncio.sleep(min(0.05 * 2 ** attempt, 2.0))
                continue
            return rec
    finally:
        sem.release()


def _agent_exit(e: SystemExit) -> RuntimeError:
    """sys.exit() in the agent (a script's main reused as the agent) ends its trial, not the
    run: raised on, it ended `otel-assay run` with the agent's code, sys.exit(0) as exit 0
    (deploy) after one trial. It is a failed trial, recorded as an exception so the lake says
    so too (a SystemExit(0) on the trial root reads as a trial that did not fail)."""
    return RuntimeError(f"the agent called sys.exit({e.code!r}) instead of returning its output")


async def _exit_as_error(aw):
    # before asyncio sees it: a SystemExit escaping a task stops the event loop, and the run
    # ended silently with the agent's exit code
    try:
        return await aw
    except SystemExit as e:
        raise _agent_exit(e) from None


async def _one_trial(st: _ScenarioState, idx: int, attempt: int, agent, is_async, version, pool, timeout,
                     collector) -> TrialRecord:
    sc = st.scenario
    t = Trial(sc.name, version=version, index=idx,
              attributes={ATTEMPT_ATTR: attempt, "assay.run.method": st.cfg.method})
    t.start()
    tid = t.span.get_span_context().trace_id if t.span is not None else None
    if collector is not None and tid is not None:
        collector.watch(tid)
    t0 = time.monotonic()
    output, exc = None, None
    try:
        if is_async:
            output = await asyncio.wait_for(_exit_as_error(agent(sc.input)), timeout)
        else:
            ctx = contextvars.copy_context()
            fut = asyncio.get_running_loop().run_in_executor(pool, ctx.run, _call_agent_sync, agent, sc.input)
            output = await asyncio.wait_for(fut, timeout)
    except (asyncio.TimeoutError, TimeoutError) as e:
        exc = e if isinstance(e, TimeoutError) else TimeoutError(f"trial exceeded {timeout}s")
        if not str(exc):
            exc = TimeoutError(f"trial exceeded {timeout}s")
    except Exception as e:  # noqa: BLE001 - the agent's failure is the trial's outcome
        exc = e
    except SystemExit as e:  # a sync agent's (an async one's is converted in _exit_as_error)
        exc = _agent_exit(e)
    except BaseException as e:
        # cancelled: Ctrl-C or SIGTERM stopped the run mid-trial. The trial is ended, not left
        # without its root span, and excluded like an infrastructure error: it measured
        # nothing about the agent (a resumed run goes on after it). A failed outcome given here:
        # a trial ended by KeyboardInterrupt records none of its own
        t.outcome(passed=False, error_class="infrastructure")
        t.finish(e)
        raise
    duration = time.monotonic() - t0
    facts = collector.peek(tid) if (collector is not None and tid is not None) else StepFacts()
    facts.duration_s = duration
    passed, score, reason, error_class = False, None, None, None
    if exc is None:
        try:
            passed, score, reason = sc.judge(output, facts)
        except UsageError:
            t.finish()
            raise
        except Exception as e:  # noqa: BLE001
            t.finish()
            raise UsageError(f"scenario {sc.name!r}: the evaluator raised {type(e).__name__}: {e}") from None
        if facts.n_llm == 0 and not facts.tools:
            error_class = "empty-run"
        t.outcome(passed=passed, score=score, error_class=error_class)
        if reason:
            t.span.set_attribute(REASON_ATTR, str(reason)[:500])
        t.finish()
    else:
        error_class = classify_error(exc)
        reason = f"{type(exc).__name__}: {exc}"[:500]
        t.finish(exc)
    facts = collector.take(tid) if (collector is not None and tid is not None) else facts
    if error_class == "timeout":
        counted = bool(facts.tools)
    else:
        counted = error_class not in EXCLUDED_CLASSES
    return TrialRecord(sc.name, idx, attempt, bool(passed) if exc is None else False, counted, error_class, score,
                       reason, duration, facts.tokens, t.trace_id, output, facts.n_steps, len(facts.tools),
                       facts.cost_usd, list(facts.unpriced))
