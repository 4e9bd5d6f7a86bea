"""The gate: configuration and the deploy / block / manual decision (DESIGN §8, paper Def. 6.2).

>>> from otel_assay.gate import load_config, run_gate
>>> result = run_gate("traces", load_config("assay.yaml"), baseline="version=v1", candidate="version=v2")
>>> result.decision, result.exit_code
('block', 1)

Per scenario the gate runs, on the trials of a baseline and a candidate selection:

- ``pass_rate``   the candidate's pass rate against the threshold θ (paper Def. 3.6, Wilson
                  interval, with the exact binomial test confirming each decision on small
                  samples); only when a threshold is configured, so that an unchanged
                  candidate can deploy without one;
- ``regression``  did the pass rate drop (paper Def. 3.7 as amended by DESIGN §6): FAIL on a
                  significant drop of at least δ, PASS on non-inferiority; with paired
                  trials (same trial indices in both arms) the FAIL test is exact McNemar;
- ``fingerprint`` Hotelling T² on the behavioural fingerprints (paper Thm 7.1): FAIL when
                  the mean fingerprint moved, with the smallest shift it could have seen;
- ``stability``   the stability sub-scores (seeds/stability-subscores.txt): drift flags
                  that the candidate raises and the baseline did not; reported, and gating
                  only when ``checks.stability`` is on (they are "look here" heuristics).

and ``contracts`` / ``metamorphic`` when configured (each contract or relation must hold
in its threshold share of the candidate's trials).

One FAIL of any gating check in any scenario blocks, so the FAIL tests of all of them form
ONE multiple-testing family, corrected together (``correction``, Holm by default): every
scenario's pass_rate, regression and fingerprint test and each of its contracts and
relations. Holm then keeps the chance that an unchanged candidate is blocked at all at or
below alpha; corrected check by check, k gating checks would block it at up to k alpha.
Checks that are reported only or SKIPPED, stability (its new drift flags make it
INCONCLUSIVE, never FAIL: no test) and a fingerprint on too few trials to reject at all
are not in the family: they could block nothing and would only cost power. Each check's
``pvalue_adjusted`` is its p-value adjusted within the family. A PASS needs every scenario
to PASS, which needs no correction. The fingerprint's permutation count grows with the
family so that its p-value can reach the corrected level (see ``_permutations``). Coverage
is computed on the candidate's trials. Decision: **deploy** when every gating check PASSes
and coverage meets its minimum, **block** when any FAILs, **manual** otherwise.

Trials without an outcome are judged only by the checks that do not need one (fingerprint,
stability, coverage); trials the error classes exclude (infrastructure, pre-validation,
empty runs) count in no check and are reported.
"""

from __future__ import annotations

import copy
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import stats
from .errors import EXIT_BLOCK, EXIT_DEPLOY, EXIT_MANUAL, DataError, UsageError, interrupted

CHECKS = ("pass_rate", "regression", "fingerprint", "stability", "contracts", "metamorphic")
CORRECTIONS = ("holm", "bonferroni", "bh", "by", "none")
COVERAGE_DIMENSIONS = ("tool", "path", "state", "boundary", "model")
STABILITY_SCORES = ("tool_usage_stability", "response_consistency", "redundancy", "cost_per_progress")
PASS, FAIL, INCONCLUSIVE, SKIPPED = "PASS", "FAIL", "INCONCLUSIVE", "SKIPPED"
DECISION_EXIT = {"deploy": EXIT_DEPLOY, "block": EXIT_BLOCK, "manual": EXIT_MANUAL}

# Wall-clock latency differs between machines and days with no change to the agent; with a
# stored baseline (paper §7.3) it would make the fingerprint test block every run.
DEFAULT_EXCLUDED_FEATURES = ("latency_s",)
# Bookkeeping columns of the fingerprint matrix that are not features.
_ID_COLUMNS = ("trace_id", "scenario", "version", "run_id")


# ================================================================== configuration
@dataclass
class ScenarioSettings:
    """The settings one scenario is judged with (the suite's, with its overrides applied)."""

    threshold: float | None
    delta: float
    beta: float
    checks: dict[str, bool]


@dataclass
class GateConfig:
    """Everything the gate can be told. Defaults are the documented defaults of ``init``."""

    alpha: float = 0.05
    beta: float = 0.10
    delta: float = 0.10
    threshold: float | None = None
    correction: str = "holm"
    min_coverage: float | None = None
    pairing: str = "auto"
    checks: dict[str, bool] = field(default_factory=lambda: {
        "pass_rate": True, "regression": True, "fingerprint": True, "stability": False, "contracts": True,
        "metamorphic": True})
    exclude_features: tuple[str, ...] = DEFAULT_EXCLUDED_FEATURES
    permutations: int = 9999
    seed: int = 0
    stability_floor: float = 0.5
    coverage_tools: tuple[str, ...] = ()
    coverage_models: tuple[str, ...] = ()
    coverage_weights: dict[str, float] | None = None
    state_lambda: float = stats.DEFAULT_STATE_LAMBDA
    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)
    contracts: list = field(default_factory=list)          # oracles.contracts.Contract
    metamorphic: list = field(default_factory=list)        # oracles.metamorphic.Relation
    outcome_from_contracts: tuple[str, ...] = ()           # contract names; () = keep recorded outcomes only
    source: str = "(defaults)"

    def for_scenario(self, scenario: str) -> ScenarioSettings:
        o = self.scenarios.get(scenario, {})
        checks = dict(self.checks)
        checks.update(o.get("checks", {}))
        return ScenarioSettings(o.get("threshold", self.threshold), o.get("delta", self.delta),
                                o.get("beta", self.beta), checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "alpha": self.alpha, "beta": self.beta, "delta": self.delta,
            "threshold": self.threshold, "correction": self.correction, "min_coverage": self.min_coverage,
            "pairing": self.pairing, "checks": dict(self.checks),
            "fingerprint": {"exclude": list(self.exclude_features), "permutations": self.permutations,
                            "seed": self.seed},
            "stability": {"floor": self.stability_floor},
            "coverage": {"tools": list(self.coverage_tools), "models": list(self.coverage_models),
                         "weights": self.coverage_weights, "state_lambda": self.state_lambda},
            "scenarios": copy.deepcopy(self.scenarios),
        }


STARTER_CONFIG = """\
# otel-assay gate configuration (otel-assay gate LAKE --config assay.yaml).
# Every key is optional; the values below are the defaults. Unknown keys are errors.
version: 1

# Error rates and effect size.
alpha: 0.05        # false-alarm rate of the whole gate: the chance that one or more FAILs
                   # block a candidate that did not change (with holm or bonferroni)
beta: 0.10         # 1 - power, for the reported power, n* and smallest detectable shift
delta: 0.10        # smallest pass-rate drop that matters: a drop >= delta can FAIL,
                   # and PASS (non-inferiority) proves the drop is < delta

# Absolute pass-rate bar for the candidate (paper Def. 3.6). Off (null) by default, so an
# unchanged candidate can deploy; set e.g. 0.85 to also require the rate to be >= 0.85.
threshold: null

# Multiple testing: one FAIL anywhere blocks, so the FAIL tests of every gating check
# (pass_rate, regression, fingerprint, each contract and relation) in every scenario are
# corrected together as one family: holm (family-wise), bonferroni, bh, by (false
# discovery rate) or none.
correction: holm

# Coverage of the candidate's trials (0..1) needed to deploy; null = report only.
min_coverage: null

# auto: use exact McNemar when baseline and candidate trials pair by (scenario, trial
# index); off: always the unpaired Fisher test.
pairing: auto

# Which checks run. A check that is off is not run; stability is reported either way and
# gates only when on. contracts and metamorphic run when their sections below are not empty.
checks:
  pass_rate: true      # needs threshold
  regression: true
  fingerprint: true
  stability: false
  contracts: true
  metamorphic: true

fingerprint:
  # Fingerprint columns left out of the Hotelling T^2 test. Wall-clock latency changes
  # with the machine, so a stored baseline would flag every run.
  exclude: [latency_s]
  # permutation p-value draws (used below 100 trials per scenario): at least this many,
  # raised with the number of FAIL tests so the smallest p-value, 1/(permutations + 1),
  # stays a tenth of the corrected per-test level (at most 199999 unless set higher)
  permutations: 9999
  seed: 0

stability:
  floor: 0.5           # a mean sub-score below this raises a drift flag

coverage:
  tools: []            # available tools; empty = the tool definitions recorded on LLM spans
  models: []           # models you intend to support; empty = model coverage n/a
  # weights: {tool: 1, path: 1, state: 1, boundary: 1, model: 1}   # a dimension not listed weighs 1
  state_lambda: 50     # expected number of distinct abstract states (paper Eq. 17)

# Per-scenario overrides of threshold, delta, beta and checks, e.g.:
# scenarios:
#   refund-request:
#     threshold: 0.9
#     delta: 0.05
#   order-status:
#     checks: {fingerprint: false}
scenarios: {}

# Behavioural contracts, judged on the recorded traces (no agent runs, no tokens). Each
# holds in at least `threshold` (default 0.95) of the candidate's trials, per scenario;
# `otel-assay contracts --help` lists every kind. For example:
# contracts:
#   - max_steps: 12
#   - must_call: [lookup_order]
#   - never_call: delete_account
#   - final_output_matches: "(?i)refund"
#     threshold: 0.9
#   - tool_args_schema:
#       issue_refund: {type: object, required: [amount], properties: {amount: {maximum: 500}}}
contracts: []

# For agents that record no outcome: a trial passes when all of these contracts hold.
# outcome_from_contracts: [max_steps, must_call]

# Metamorphic relations on (source, follow-up) trial pairs recorded with
# otel_assay.metamorphic.follow_up(...); `otel-assay metamorphic --help`. For example:
# metamorphic:
#   - relation: doc-order
#     family: permutation
#     compare: same_final_answer
metamorphic: []
"""


class _Located:
    """Line numbers of the keys of a YAML document, by key path."""

    def __init__(self, source: str):
        self.source = source
        self.lines: dict[tuple, int] = {}

    def where(self, path: tuple) -> str:
        for i in range(len(path), -1, -1):
            if path[:i] in self.lines:
                return f"{self.source}:{self.lines[path[:i]]}"
        return self.source

    def error(self, path: tuple, message: str) -> UsageError:
        key = ".".join(str(p) for p in path) or "(top level)"
        return UsageError(f"{self.where(path)}: {key}: {message}")

    def walk(self, node, path: tuple = ()) -> None:
        import yaml

        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, value_node in node.value:
                key = key_node.value
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise UsageError(f"{self.source}:{line}: {'.'.join(map(str, path + (key,)))}: "
                                     f"duplicate key (first at line {seen[key]}); keep one")
                seen[key] = line
                self.walk(value_node, path + (key,))
                self.lines[path + (key,)] = line
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.walk(item, path + (i,))


def _text_number_hint(value) -> str:
    """Why a number the user wrote arrived as text: YAML 1.1 (PyYAML) reads an exponent
    without a decimal point, such as 1e-3, as a string."""
    if isinstance(value, str):
        try:
            if not math.isfinite(float(value)):
                return ""
        except ValueError:
            return ""
        return f" (text, not a number: write it with a decimal point, e.g. {float(value)!r}, and without quotes)"
    return ""


def _unit(loc: _Located, path: tuple, value, *, closed_high: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise loc.error(path, f"must be a number in (0, 1{']' if closed_high else ')'}, got {value!r}"
                        + _text_number_hint(value))
    v = float(value)
    if not (0.0 < v < 1.0 or (closed_high and v == 1.0)):
        raise loc.error(path, f"must be in (0, 1{']' if closed_high else ')'}, got {value!r}")
    return v


def _keys(loc: _Located, path: tuple, value, allowed: tuple[str, ...]) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise loc.error(path, f"must be a mapping, got {type(value).__name__}")
    for k in value:
        if k not in allowed:
            raise loc.error(path + (k,), f"unknown key; allowed here: {', '.join(allowed)}")
    return value


def _str_list(loc: _Located, path: tuple, value) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        raise loc.error(path, f"must be a list of names, got {value!r}")
    return tuple(value)


def _checks(loc: _Located, path: tuple, value) -> dict[str, bool]:
    value = _keys(loc, path, value, CHECKS)
    for k, v in value.items():
        if not isinstance(v, bool):
            raise loc.error(path + (k,), f"must be true or false, got {v!r}")
    return dict(value)


def parse_config(text: str, source: str = "<config>") -> GateConfig:
    """Validate a YAML configuration (``yaml.safe_load``); every error names the key and line."""
    import yaml

    loc = _Located(source)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UsageError(f"{where}: malformed YAML: {problem}; fix the syntax (run `otel-assay init` "
                         "for a valid starter file)") from None
    if node is not None:
        loc.walk(node)
    cfg = GateConfig(source=source)
    if data is None:
        return cfg
    top = ("version", "alpha", "beta", "delta", "threshold", "correction", "min_coverage", "pairing", "checks",
           "fingerprint", "stability", "coverage", "scenarios", "contracts", "outcome_from_contracts", "metamorphic")
    data = _keys(loc, (), data, top)
    if data.get("version", 1) != 1:
        raise loc.error(("version",), f"unsupported config version {data['version']!r}; this otel-assay reads 1")
    for key in ("alpha", "beta", "delta"):
        if key in data:
            setattr(cfg, key, _unit(loc, (key,), data[key]))
    if data.get("threshold") is not None:
        cfg.threshold = _unit(loc, ("threshold",), data["threshold"])
    if data.get("min_coverage") is not None:
        cfg.min_coverage = _unit(loc, ("min_coverage",), data["min_coverage"], closed_high=True)
    if "correction" in data:
        if data["correction"] not in CORRECTIONS:
            raise loc.error(("correction",), f"must be one of {', '.join(CORRECTIONS)}, got {data['correction']!r}")
        cfg.correction = data["correction"]
    if "pairing" in data:
        # YAML reads a bare `off` (the documented value) as false
        pairing = "off" if data["pairing"] is False else data["pairing"]
        if pairing not in ("auto", "off"):
            raise loc.error(("pairing",), f"must be auto or off, got {data['pairing']!r}")
        cfg.pairing = pairing
    cfg.checks.update(_checks(loc, ("checks",), data.get("checks")))

    fp = _keys(loc, ("fingerprint",), data.get("fingerprint"), ("exclude", "permutations", "seed"))
    if "exclude" in fp:
        cfg.exclude_features = _str_list(loc, ("fingerprint", "exclude"), fp["exclude"])
    for key, minimum in (("permutations", 99), ("seed", 0)):
        if key in fp:
            v = fp[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise loc.error(("fingerprint", key), f"must be an integer >= {minimum}, got {v!r}")
            setattr(cfg, key, v)

    st = _keys(loc, ("stability",), data.get("stability"), ("floor",))
    if "floor" in st:
        cfg.stability_floor = _unit(loc, ("stability", "floor"), st["floor"])

    cov = _keys(loc, ("coverage",), data.get("coverage"), ("tools", "models", "weights", "state_lambda"))
    cfg.coverage_tools = _str_list(loc, ("coverage", "tools"), cov.get("tools"))
    cfg.coverage_models = _str_list(loc, ("coverage", "models"), cov.get("models"))
    if cov.get("weights") is not None:
        w = _keys(loc, ("coverage", "weights"), cov["weights"], COVERAGE_DIMENSIONS)
        for k, v in w.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise loc.error(("coverage", "weights", k), f"must be a number >= 0, got {v!r}")
        # a dimension not listed keeps its default weight 1: `weights: {boundary: 0}` drops one
        # dimension, it does not zero the other four (which left the overall undefined)
        cfg.coverage_weights = {**{k: 1.0 for k in COVERAGE_DIMENSIONS}, **{k: float(v) for k, v in w.items()}}
        if not any(cfg.coverage_weights.values()):
            raise loc.error(("coverage", "weights"), "every weight is 0, so the overall coverage is undefined; "
                            "give at least one dimension a weight > 0 (or drop min_coverage)")
    if "state_lambda" in cov:
        v = cov["state_lambda"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
            raise loc.error(("coverage", "state_lambda"), f"must be a number > 0, got {v!r}")
        cfg.state_lambda = float(v)

    scen = data.get("scenarios") or {}
    if not isinstance(scen, dict):
        raise loc.error(("scenarios",), "must be a mapping of scenario name -> overrides")
    written = _written_keys(node, "scenarios")
    for name, over in scen.items():
        # a scenario name is text: `1.10:` is scenario "1.10", not the float 1.1 (nor "1.1")
        name = name if isinstance(name, str) else written.get(name, str(name))
        path = ("scenarios", name)
        if over is None:
            continue
        if "alpha" in (over if isinstance(over, dict) else {}):
            raise loc.error(path + ("alpha",), "alpha is suite-wide (the multiple-testing correction needs one "
                                               "level); set it at the top level")
        over = _keys(loc, path, over, ("threshold", "delta", "beta", "checks"))
        parsed: dict[str, Any] = {}
        for key in ("delta", "beta"):
            if key in over:
                parsed[key] = _unit(loc, path + (key,), over[key])
        if "threshold" in over:
            parsed["threshold"] = None if over["threshold"] is None else _unit(loc, path + ("threshold",),
                                                                              over["threshold"])
        if "checks" in over:
            parsed["checks"] = _checks(loc, path + ("checks",), over["checks"])
        cfg.scenarios[str(name)] = parsed

    from .oracles.contracts import ContractError, parse_contracts
    from .oracles.metamorphic import parse_relations

    for key, parse in (("contracts", parse_contracts), ("metamorphic", parse_relations)):
        spec = data.get(key)
        if spec in (None, {}):
            continue
        try:
            setattr(cfg, key, parse(spec, where=key))
        except ContractError as e:
            # the message names the item (contracts[3]); the line is that item's, not the section's
            m = re.match(rf"{key}\[(\d+)\]", str(e))
            if m:
                raise UsageError(f"{loc.where((key, int(m.group(1)) - 1))}: {e}") from None
            raise loc.error((key,), str(e)) from None
    oc = data.get("outcome_from_contracts")
    if oc is not None:
        names = [c.name for c in cfg.contracts]
        chosen = names if oc is True else list(_str_list(loc, ("outcome_from_contracts",), oc))
        unknown = [n for n in chosen if n not in names]
        if not chosen and names:
            raise loc.error(("outcome_from_contracts",), f"is empty; list the contracts a passing trial must "
                            f"meet (configured: {', '.join(names)}), or remove the key")
        if unknown or not chosen:
            raise loc.error(("outcome_from_contracts",), f"names contracts that are not configured: "
                            f"{', '.join(unknown) or '(none)'}; configured: {', '.join(names) or 'none'}")
        cfg.outcome_from_contracts = tuple(chosen)
    return cfg


def _written_keys(root, section: str) -> dict:
    """The keys of the top-level mapping ``section`` that YAML read as something other than
    text (numbers, booleans, null), each to its text as written in the file."""
    import yaml

    out: dict = {}
    if not isinstance(root, yaml.MappingNode):
        return out
    for key, value in root.value:
        if key.value == section and isinstance(value, yaml.MappingNode):
            constructor = yaml.constructor.SafeConstructor()
            for k, _ in value.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:str":
                    out[constructor.construct_object(k)] = k.value
    return out


def load_config(path: str | os.PathLike | None) -> GateConfig:
    """Read and validate a YAML config file; None gives the defaults."""
    if path is None:
        return GateConfig()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"config file {p} does not exist; create one with `otel-assay init {p}`") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read config file {p}: {e}") from None
    return parse_config(text, str(p))


# ================================================================== results
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
    """What the gate found and decided. ``as_dict`` is the JSON report (schema gate-report v1)."""

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

    def as_dict(self) -> dict[str, Any]:
        from .report.json_report import report_dict

        return report_dict(self)


# ================================================================== data access
def _lakes(eng_b, eng_c) -> list:
    """The engines of baseline and candidate, once each (both are one engine on one lake)."""
    return [eng_b] if eng_b is eng_c else [eng_b, eng_c]


def _open(lake) -> Any:
    from .analyze.engine import Engine
    from .lake.files import memory_limit_from_env
    from .lake.files import LakeError

    if not isinstance(lake, (str, os.PathLike)):
        return lake
    # DuckDB's default is 80 % of RAM; the gate must stay within a CI runner's budget
    # (2 GB at 2,000,000 spans: 1.3 GB peak with this limit, bench/bench_gate.py), and
    # DuckDB spills to disk past the limit.
    limit = memory_limit_from_env("1.5GB")
    try:
        eng = Engine(lake, memory_limit=limit)
    except LakeError as e:
        raise DataError(f"{lake}: {e}") from None
    except Exception as e:  # duckdb raises its own kinds on corrupt or truncated files
        if interrupted(e):
            raise
        raise DataError(f"{lake}: cannot read the lake: {str(e).splitlines()[0]}") from None
    eng.con.execute("SET enable_progress_bar = false")  # ours is on stderr, and only on a terminal
    return eng


def _check_has_trials(eng, lake_name: str) -> None:
    n_spans = eng.rows("SELECT count(*) FROM spans")[0][0]
    if n_spans == 0:
        raise DataError(f"{lake_name}: the lake is empty (no spans); run the agent's trials with "
                        "otel_assay.trial(...) writing to this lake first")
    n_trials, n_traces = eng.rows("SELECT count(scenario), count(*) FROM trials")[0]
    if n_trials == 0:
        raise DataError(f"{lake_name}: the lake has {n_spans} spans in {n_traces} traces but no trials "
                        "(no trace carries assay.scenario, none is labelled with a scenario); wrap each agent "
                        "run in `with otel_assay.trial(scenario, version=...)`, or label the traces of other "
                        "instrumentation: `otel-assay label LAKE --file labels.csv` with a scenario column")


def _select(eng, selector: str | None, table: str, lake_name: str) -> int:
    from .analyze.select import NoTrialsError, Selection, SelectorError, select_trials

    try:
        sel = Selection.parse([selector] if selector else [])
    except SelectorError as e:
        raise UsageError(str(e)) from None
    try:
        select_trials(eng, sel, table)
    except NoTrialsError as e:
        raise DataError(f"{lake_name}: {e}") from None
    # trials without a scenario are traces that are not trials (e.g. gate result spans)
    eng.rows(f"DELETE FROM {table} WHERE trace_id IN (SELECT trace_id FROM trials WHERE scenario IS NULL)")
    n = eng.rows(f"SELECT count(*) FROM {table}")[0][0]
    if n == 0:
        raise DataError(f"{lake_name}: no trials match {sel} (the matching traces carry no assay.scenario)")
    return n


def _versions(eng) -> list[tuple[str, int]]:
    """The lake's versions with their trial counts, oldest first. Two versions whose trials
    interleave in time (run side by side, as the demo runs them) have no older one: which
    trial happened to start first would pick the baseline, so they go in name order."""
    rows = eng.rows("SELECT version, count(*), min(start_time_unix_nano), max(start_time_unix_nano) FROM trials "
                    "WHERE scenario IS NOT NULL GROUP BY version ORDER BY min(start_time_unix_nano), version")
    if len(rows) == 2 and rows[0][0] is not None and rows[1][0] is not None and rows[1][2] <= rows[0][3]:
        rows.sort(key=lambda r: r[0])
    return [(v, n) for v, n, _, _ in rows]


def _default_selectors(eng, baseline, candidate, separate_baseline: bool,
                       lake_name: str) -> tuple[str | None, str | None]:
    """With no selectors: the two versions of the lake, oldest first, are baseline and candidate."""
    if separate_baseline or (baseline and candidate):
        return baseline, candidate
    from .analyze.select import Selection, SelectorError

    for given in (baseline, candidate):
        if given:  # a wrong key or shape in the one given is the thing to say
            try:
                Selection.parse([given])
            except SelectorError as e:
                raise UsageError(str(e)) from None
    versions = _versions(eng)
    names = [v for v, _ in versions if v is not None]
    listing = ", ".join(f"{v} ({n} trials)" for v, n in versions) or "none"
    if baseline is None and candidate is None and len(names) == 2 and len(versions) == 2:
        return f"version={names[0]}", f"version={names[1]}"
    if len(names) == 2 and len(versions) == 2:
        other = {f"version={names[0]}": f"version={names[1]}", f"version={names[1]}": f"version={names[0]}"}
        if baseline in other:
            return baseline, other[baseline]
        if candidate in other:
            return other[candidate], candidate
    given = baseline or candidate
    if given:  # one that matches no trial is the thing to say (exit 4, naming what the lake has)
        _select(eng, given, "_given_trials", lake_name)
    raise UsageError(f"say which trials to compare with --baseline SEL and --candidate SEL (for example "
                     f"--baseline version=v1 --candidate version=v2); the lake's versions: {listing}")


def _arm_trials(eng, table: str) -> dict[str, np.ndarray]:
    t = eng.query(f"SELECT trace_id, scenario, trial_index, counted, passed, error_class, "
                  f"start_time_unix_nano FROM trials SEMI JOIN {table} USING (trace_id) "
                  f"ORDER BY scenario, start_time_unix_nano, trace_id")
    cols = {name: t.column(name).to_numpy(zero_copy_only=False) for name in t.column_names}
    return cols


def _arms(cols: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
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


def _arm_summary(t: dict[str, np.ndarray], alpha: float) -> Arm:
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


def _complete_trials(arms: dict[str, dict[str, np.ndarray]]) -> tuple[set[str], int]:
    """Trace ids of the counted trials that ran to their end, and how many counted ones did not.

    Pass rates know an interrupted trial's outcome is unknown; its fingerprint would still
    enter the T² test as a run with fewer steps and tokens, so a candidate interrupted more
    often (a human pausing it, a UI stopping streams) would read as a behaviour shift."""
    complete, left = set(), 0
    for a in arms.values():
        for t, k, cls in zip(a["trace_id"], a["counted"], a["error_class"]):
            if not k:
                continue
            if cls in INCOMPLETE_CLASSES:
                left += 1
            else:
                complete.add(str(t))
    return complete, left


def _outcomes(t: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(trial_index, passed) of the counted trials with a known outcome, in run order."""
    counted = t["counted"].astype(bool)
    known = np.array([p is not None and p == p for p in t["passed"]], dtype=bool) & counted
    idx = t["trial_index"][known]
    return idx, np.array([bool(p) for p in t["passed"][known]], dtype=bool)


# ================================================================== checks
# The most permutations the gate draws for one fingerprint test (about 1-2 s per scenario at
# 100 trials on a CI core). See _permutations.
MAX_PERMUTATIONS = 199_999
# The permutation p-value's floor 1 / (B + 1) is held at a tenth of the family's per-test level
# when the cap allows: a shift whose true p-value is a fifth of that level then FAILs with
# probability > 0.99 (at most 8 of B relabellings may beat it), where a floor just under the
# level would lose it whenever one relabelling does (probability 1 - e^-5).
_PERMUTATION_RESOLUTION = 10


@dataclass
class _Hypothesis:
    """The FAIL side of one gating check: its p-values (several for a contracts check, one per
    contract) and ``finish``, which turns their adjusted values into the check's verdict."""

    check: Check
    pvalues: list[float]
    finish: Callable[[list[float]], None]


@dataclass
class _Family:
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
        adjusted = _adjust(flat, self.method, self.alpha)
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


def _adjust(pvalues: list[float], method: str, alpha: float) -> list[float]:
    if not pvalues:
        return []
    if method == "none":
        return list(pvalues)
    return [float(p) for p in stats.adjust_pvalues(pvalues, method=method, alpha=alpha).adjusted]


def _rate_reason(v, verb: str = "contains") -> str:
    """Why a pass-rate verdict is neither PASS nor FAIL: the interval holds the threshold, or
    a bound is past it but the exact binomial test (which guards small samples) disagrees."""
    th = v.threshold
    if v.ci.high < th:
        return (f"upper bound {v.ci.high:.3f} < threshold {th}, but on {v.n} trials the exact binomial test "
                f"does not confirm it (p={v.pvalue_fail:.3g} >= alpha={v.alpha:.3g}); more trials would decide")
    if v.ci.low >= th:
        return (f"lower bound {v.ci.low:.3f} >= threshold {th}, but on {v.n} trials the exact binomial test "
                f"does not confirm it (p={v.pvalue_pass:.3g} >= alpha={v.alpha:.3g}); more trials would decide")
    return f"interval [{v.ci.low:.3f}, {v.ci.high:.3f}] {verb} threshold {th}"


def _pass_rate_checks(results: list[ScenarioResult], cfg: GateConfig, family: _Family) -> None:
    """Paper Def. 3.6 per scenario. PASS: the verdict's PASS (no correction, see _Family);
    FAIL: its FAIL p-value (Wilson bound and exact binomial test) after the correction."""
    for r in results:
        s = r.settings
        if not s.checks["pass_rate"]:
            continue
        if s.threshold is None:
            continue
        if r.candidate.trials == 0:
            # a scenario only the baseline ran: open, as the regression check has it; SKIPPED
            # ("no outcome") left it unjudged, so with pass_rate the only gating check a
            # candidate that dropped a scenario deployed
            r.checks.append(Check("pass_rate", INCONCLUSIVE, "the candidate did not run this scenario"))
            continue
        if r.candidate.with_outcome == 0:
            r.checks.append(Check("pass_rate", SKIPPED, "no candidate trial has an outcome; judged by the "
                                  "checks that need none (fingerprint, stability, coverage)", gating=False))
            continue
        a, th = r.candidate, s.threshold
        v = stats.verdict(a.passes, a.with_outcome, th, cfg.alpha)
        n_star = None
        if 0 < th - s.delta:
            n_star = stats.sample_size_threshold(th, s.delta, cfg.alpha, s.beta)
        check = Check("pass_rate", INCONCLUSIVE, "", stats={
            "successes": a.passes, "n": a.with_outcome, "pass_rate": v.estimate, "ci_low": v.ci.low,
            "ci_high": v.ci.high, "threshold": th, "pvalue": v.pvalue_fail, "pvalue_adjusted": None,
            "n_star": n_star})
        r.checks.append(check)

        def finish(adjusted, check=check, v=v):
            p_adj = adjusted[0]
            check.stats["pvalue_adjusted"] = p_adj
            th = v.threshold
            if v.verdict is stats.Verdict.PASS:
                check.verdict, check.reason = PASS, f"lower {1 - cfg.alpha:.0%} bound {v.ci.low:.3f} >= threshold {th}"
            elif p_adj < cfg.alpha:
                check.verdict, check.reason = FAIL, (f"upper bound {v.ci.high:.3f} < threshold {th} "
                                                     f"({family.adjusted_tag()}p={p_adj:.3g})")
            elif v.verdict is stats.Verdict.FAIL:
                check.reason = (f"upper bound {v.ci.high:.3f} < threshold {th} but not after "
                                f"{family.describe()} (adjusted p={p_adj:.3g})")
            else:
                check.reason = _rate_reason(v)

        family.add(check, [v.pvalue_fail], finish)


def _sprt_paths(results: list[ScenarioResult], arms_c, cfg: GateConfig) -> dict[str, Any]:
    """For the HTML plot: Wald's SPRT over the candidate's trials in run order, against the
    threshold, or the baseline's pass rate when there is none."""
    out = {}
    for r in results:
        if r.scenario not in arms_c:
            continue
        s = r.settings
        theta, from_baseline = s.threshold, False
        if theta is None and r.baseline is not None and r.baseline.rate is not None:
            theta, from_baseline = r.baseline.rate, True
        _, ok = _outcomes(arms_c[r.scenario])
        if theta is None or not (s.delta < theta < 1.0) or len(ok) == 0:
            continue
        test = stats.SPRT(theta, s.delta, cfg.alpha, s.beta)
        for o in ok:
            if test.state.done:
                break
            test.update(bool(o))
        d = test.design
        out[r.scenario] = {"path": [float(x) for x in test.path], "lower": d.lower, "upper": d.upper,
                           "decision": test.state.decision, "theta": theta, "theta_from_baseline": from_baseline}
    return out


def _paired(ib, ob, ic, oc) -> tuple[int, int] | None:
    """(regressions, improvements) when both arms hold the same distinct trial indices."""
    if len(ib) == 0 or len(ib) != len(ic):
        return None
    if any(x is None or x != x for x in ib) or any(x is None or x != x for x in ic):
        return None
    ib, ic = ib.astype(np.int64), ic.astype(np.int64)
    if len(np.unique(ib)) != len(ib) or not np.array_equal(np.sort(ib), np.sort(ic)):
        return None
    b = ob[np.argsort(ib)]
    c = oc[np.argsort(ic)]
    return int(np.sum(b & ~c)), int(np.sum(~b & c))


def _regression_checks(results: list[ScenarioResult], arms_b, arms_c, cfg: GateConfig, family: _Family) -> None:
    for r in results:
        if not r.settings.checks["regression"]:
            continue
        if r.baseline is None or r.baseline.trials == 0:
            r.checks.append(Check("regression", INCONCLUSIVE, "no baseline trials for this scenario: "
                                  "nothing to compare with (run the baseline on it)"))
            continue
        if r.candidate.trials == 0:
            r.checks.append(Check("regression", INCONCLUSIVE, "the candidate did not run this scenario"))
            continue
        if r.baseline.with_outcome == 0 or r.candidate.with_outcome == 0:
            side = "baseline" if r.baseline.with_outcome == 0 else "candidate"
            r.checks.append(Check("regression", SKIPPED, f"no {side} trial has an outcome; judged by the "
                                  "checks that need none (fingerprint, stability, coverage)", gating=False))
            continue
        b, c, s = r.baseline, r.candidate, r.settings
        res = stats.regression_verdict(b.passes, b.with_outcome, c.passes, c.with_outcome, s.delta, cfg.alpha, s.beta)
        pairs = None
        if cfg.pairing == "auto":
            pairs = _paired(*_outcomes(arms_b[r.scenario]), *_outcomes(arms_c[r.scenario]))
        mc = stats.mcnemar_exact(*pairs) if pairs else None
        test = "McNemar" if mc else "Fisher"
        e = res.effects
        st = {"test": test.lower() if mc is None else "mcnemar-exact", "baseline_successes": res.baseline_successes,
              "baseline_n": res.baseline_n, "candidate_successes": res.candidate_successes,
              "candidate_n": res.candidate_n, "drop": res.drop, "drop_upper": res.drop_upper,
              "pvalue": mc.pvalue if mc else res.pvalue, "pvalue_adjusted": None,
              "neg_log10_pvalue": mc.neg_log10_pvalue if mc else res.neg_log10_pvalue,
              "fisher_pvalue": res.pvalue, "cohens_h": e.cohens_h, "cohens_h_magnitude": e.cohens_h_magnitude,
              "odds_ratio": e.odds_ratio, "power": res.power, "n_star": res.n_star, "delta": s.delta}
        if mc:
            st.update(regressions=mc.regressions, improvements=mc.improvements)
        check = Check("regression", INCONCLUSIVE, "", stats=st)
        r.checks.append(check)

        # every regression test is in the family, also one whose drop is below delta: which
        # tests enter must not depend on the data, or the correction would not hold
        def finish(adjusted, check=check, res=res, s=s, test=test):
            p_adj = adjusted[0]
            check.stats["pvalue_adjusted"] = p_adj
            tag = family.adjusted_tag()
            if p_adj < cfg.alpha and res.drop >= s.delta - 1e-12:
                check.verdict, check.reason = FAIL, (f"{tag}{test} p={p_adj:.3g} < alpha={cfg.alpha} and drop "
                                                     f"{res.drop:.3f} >= delta={s.delta}")
            elif res.drop_upper < s.delta:
                check.verdict, check.reason = PASS, (f"upper {1 - cfg.alpha:.0%} bound on the drop "
                                                     f"{res.drop_upper:.3f} < delta={s.delta}")
            else:
                # n* is the size that detects a drop of delta; past it an undecided drop lies
                # between 0 and delta, and saying "n* trials decide" asked for trials already run
                n_min = min(res.baseline_n, res.candidate_n)
                hint = ("" if not res.n_star else
                        f": about {res.n_star} trials per version decide (n*)" if n_min < res.n_star else
                        f": {n_min} trials per version already reach n*={res.n_star}; a drop of {res.drop:.3f}, "
                        "between 0 and delta, takes many more to tell from either")
                check.reason = (f"{tag}{test} p={p_adj:.3g}; upper bound on the drop {res.drop_upper:.3f} >= "
                                f"delta={s.delta}" + hint)

        family.add(check, [st["pvalue"]], finish)


def _fingerprint_tables(eng_b, eng_c, table_b: str, table_c: str):
    from .analyze.fingerprint import fingerprint_matrix, tool_vocabulary

    # both arms (and the vocabulary) read these: compute them once per lake, not per query
    for eng in _lakes(eng_b, eng_c):
        eng.materialize(["fingerprint_tools", "fingerprints"])
    vocab = sorted(set(tool_vocabulary(eng_b, table_b)) | set(tool_vocabulary(eng_c, table_c)))
    return fingerprint_matrix(eng_b, table_b, vocab), fingerprint_matrix(eng_c, table_c, vocab)


def _matrix(table, features: list[str], rows: np.ndarray) -> np.ndarray:
    return np.column_stack([table.column(f).to_numpy(zero_copy_only=False)[rows].astype(float)
                            for f in features]) if features else np.zeros((len(rows), 0))


def _fingerprint_checks(results, fp_b, fp_c, complete_b: set, complete_c: set, cfg: GateConfig, plots: dict,
                        progress: Callable[[str], None], family: _Family) -> list[str]:
    notes = []
    names = all_names = [n for n in fp_c.column_names if n not in _ID_COLUMNS]
    excluded = [n for n in cfg.exclude_features if n in names]
    names = [n for n in names if n not in cfg.exclude_features]
    # columns with a missing value (e.g. cost of an unpriced model) cannot enter the test
    missing = [n for n in names if fp_b.column(n).null_count or fp_c.column(n).null_count]
    # nor can NaN or infinity (span data such as an llm.cost.total of "nan"): T² has no
    # meaning for them, and one such span must not stop the gate
    nonfinite = [n for n in names if n not in missing and not all(
        np.isfinite(fp.column(n).to_numpy(zero_copy_only=False).astype(float)).all() for fp in (fp_b, fp_c))]
    features = [n for n in names if n not in missing and n not in nonfinite]
    if missing:
        why = []
        if any(n.startswith("cost") for n in missing):
            why.append("cost needs a priced model: set OTEL_ASSAY_PRICES to a price table CSV; the gate "
                       "commands have no --prices option")
        if any(n.endswith("_tokens") or n == "tokens_per_step" for n in missing):
            why.append("token counts need LLM calls that report gen_ai.usage.input_tokens or output_tokens")
        notes.append(f"fingerprint features left out for missing values: {', '.join(missing)}"
                     + (f" ({'; '.join(why)})" if why else ""))
    if nonfinite:
        notes.append(f"fingerprint features left out for values that are not finite numbers (NaN or infinity "
                     f"in the spans): {', '.join(nonfinite)}")
    # a misspelt exclusion would leave the feature in the test, silently (tool:<name> columns
    # exist only for the tools these trials called, so those are not checked)
    unknown = [n for n in cfg.exclude_features if n not in all_names and not n.startswith("tool:")]
    if unknown:
        notes.append(f"fingerprint.exclude names no fingerprint feature: {', '.join(unknown)} (features: "
                     f"{', '.join(n for n in all_names if not n.startswith('tool:'))}, tool:<name>)")

    def rows_by_scenario(fp, trials):
        tid = fp.column("trace_id").to_numpy(zero_copy_only=False)
        sc = fp.column("scenario").to_numpy(zero_copy_only=False)
        keep = np.fromiter((t in trials for t in tid), bool, len(tid))
        out: dict[str, np.ndarray] = {}
        order = np.flatnonzero(keep)
        for s in np.unique(sc[order].astype(str)) if len(order) else []:
            out[s] = order[sc[order] == s]
        return out

    rb, rc = rows_by_scenario(fp_b, complete_b), rows_by_scenario(fp_c, complete_c)
    todo = []
    for r in results:
        if not r.settings.checks["fingerprint"]:
            continue
        if r.scenario not in rb or r.scenario not in rc:
            side = "baseline" if r.scenario not in rb else "candidate"
            r.checks.append(Check("fingerprint", INCONCLUSIVE, f"no {side} trials for this scenario: no comparison"))
            continue
        if not features:
            r.checks.append(Check("fingerprint", INCONCLUSIVE, "no fingerprint feature is left to compare: "
                                  "fingerprint.exclude (and any feature a note says was left out) removes all "
                                  "of them; exclude fewer, or turn the check off with checks: {fingerprint: false}"))
            continue
        todo.append(r)
    # the family's per-test level once these tests join it: the permutation p-value must be
    # able to get below it, or no fingerprint could FAIL (1 / (B + 1) >= alpha / m: from 500
    # scenarios at the default 9999 permutations)
    level = family.level(family.size + len(todo))
    n_perm = _permutations(cfg.permutations, level)
    found = []
    for i, r in enumerate(todo):
        progress(f"fingerprint {r.scenario} ({i + 1}/{len(todo)})")
        xb, xc = _matrix(fp_b, features, rb[r.scenario]), _matrix(fp_c, features, rc[r.scenario])
        h = stats.hotelling_t2(xb, xc, alpha=cfg.alpha, beta=r.settings.beta, n_permutations=n_perm,
                               seed=cfg.seed, feature_names=features, top_k=5)
        found.append(h)
        plots.setdefault("pca", {})[r.scenario] = _pca_points(xb, xc)
    if any(h.method == "permutation" for h in found) and 1.0 / (n_perm + 1) >= level:
        notes.append(f"fingerprint: {n_perm} permutations (the most the gate draws: {MAX_PERMUTATIONS}, or "
                     f"fingerprint.permutations) give p-values no smaller than 1/{n_perm + 1}, not below "
                     f"{level:.3g}, the level {cfg.correction} holds the smallest of the suite's "
                     f"{family.size + len(todo)} FAIL tests to: a fingerprint tested by permutation (below 100 "
                     "trials per scenario) cannot FAIL; raise fingerprint.permutations, or gate fewer scenarios "
                     "or checks at once")
    for r, h in zip(todo, found):
        crit = _t2_critical(h, cfg.alpha)
        st = {"t2": None if math.isinf(h.statistic) else h.statistic, "f": h.f_statistic,
              "df": list(h.df) if h.df else None, "pvalue": h.pvalue, "pvalue_adjusted": None,
              "neg_log10_pvalue": h.neg_log10_pvalue, "method": h.method, "n_permutations": h.n_permutations,
              "d_eff": h.d_eff, "n_features": h.n_features, "shrinkage": h.shrinkage, "n_baseline": h.n_baseline,
              "n_candidate": h.n_candidate, "min_detectable_shift": h.min_detectable_shift, "t2_critical": crit,
              # a pooled SD of rounding noise (a feature constant within each arm) gives an
              # astronomically large smd: it means "separated", which null (±inf) says
              "top_features": [{"name": f.name, "smd": None if not abs(f.smd) < 1e6 else f.smd,
                                "baseline_mean": f.baseline_mean, "candidate_mean": f.candidate_mean}
                               for f in h.top_features],
              "excluded_features": excluded + missing}
        if h.verdict is stats.Verdict.INCONCLUSIVE:
            # too few trials for any p-value below alpha: no test, so not in the family
            r.checks.append(Check("fingerprint", INCONCLUSIVE, h.reason, stats=st))
            continue
        check = Check("fingerprint", INCONCLUSIVE, "", stats=st)
        r.checks.append(check)

        def finish(adjusted, check=check, h=h, scenario=r.scenario, beta=r.settings.beta):
            p_adj = adjusted[0]
            check.stats["pvalue_adjusted"] = p_adj
            # the power figures at the level the family holds its strictest test to, not at
            # alpha: a shift detectable only at alpha is not one this gate would block on.
            # A T² past this critical value FAILs under any of the corrections
            level = family.level()
            shift = (stats.hotelling_detectable_shift(h.n_baseline, h.n_candidate, h.d_eff, level, beta)
                     if h.min_detectable_shift is not None else None)
            check.stats["min_detectable_shift"] = shift
            check.stats["t2_critical"] = _t2_critical(h, level)
            check.stats["power_level"] = level
            mds = f"; smallest detectable shift {shift:.2f} SD" if shift else ""
            moved = ", ".join(f.name for f in h.top_features[:3] if f.smd != 0)
            tag = family.adjusted_tag()
            if p_adj < cfg.alpha:
                check.verdict, check.reason = FAIL, (f"behaviour shifted: {tag}p={p_adj:.3g} < alpha={cfg.alpha} "
                                                     f"(d_eff={h.d_eff}); moved most: {moved}")
            else:
                check.verdict, check.reason = PASS, (f"no shift detected: {tag}p={p_adj:.3g} "
                                                     f"(d_eff={h.d_eff}){mds}")
            plots.setdefault("t2", {})[scenario] = {"t2": check.stats["t2"], "critical": check.stats["t2_critical"],
                                                    "verdict": check.verdict}

        family.add(check, [h.pvalue], finish)
    return notes


def _permutations(configured: int, level: float) -> int:
    """Random relabellings for a permutation p-value that has to reach ``level``: at least the
    configured number, raised until the floor 1 / (B + 1) is a tenth of the level, at most
    MAX_PERMUTATIONS (or the configured number, if larger).

    Why not the F approximation instead: DESIGN §6 keeps the exact permutation p-value below
    100 trials per scenario and whenever the covariance is shrunk, because there the F
    reference does not hold its level."""
    wanted = math.ceil(_PERMUTATION_RESOLUTION / level) - 1
    return max(configured, min(wanted, MAX_PERMUTATIONS))


def _t2_critical(h, alpha: float) -> float | None:
    """The T² a shift must reach to be significant at alpha (from the F reference)."""
    if not h.df:
        return None
    from scipy.special import fdtri

    d1, d2 = h.df
    n = h.n_baseline + h.n_candidate
    return float(fdtri(d1, d2, 1.0 - alpha) * (n - 2) * d1 / d2)


def _pca_points(xb: np.ndarray, xc: np.ndarray, limit: int = 300) -> dict[str, Any]:
    """The first two principal components of both arms, up to ``limit`` trials each, for plotting."""
    x = np.vstack([xb, xc])
    if x.shape[0] < 3 or x.shape[1] == 0:
        return {"baseline": [], "candidate": [], "explained": [0.0, 0.0]}
    sd = x.std(axis=0)
    keep = sd > 1e-12
    if not keep.any():
        return {"baseline": [], "candidate": [], "explained": [0.0, 0.0]}
    z = (x[:, keep] - x[:, keep].mean(axis=0)) / sd[keep]
    rng = np.random.default_rng(0)
    fit = z if len(z) <= 5000 else z[rng.choice(len(z), 5000, replace=False)]
    _, s, vt = np.linalg.svd(fit, full_matrices=False)
    comps = vt[:2].T
    if comps.shape[1] == 1:
        comps = np.column_stack([comps, np.zeros(len(comps))])
    pts = z @ comps
    share = (s ** 2) / max((s ** 2).sum(), 1e-300)

    def sample(p):
        if len(p) > limit:
            p = p[np.sort(rng.choice(len(p), limit, replace=False))]
        return [[round(float(a), 4), round(float(b), 4)] for a, b in p]

    return {"baseline": sample(pts[: len(xb)]), "candidate": sample(pts[len(xb):]),
            "explained": [float(share[0]), float(share[1]) if len(share) > 1 else 0.0]}


def _stability(eng, table: str, floor: float) -> dict[str, dict[str, Any]]:
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


def _stability_checks(results: list[ScenarioResult], floor: float) -> None:
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


def _coverage(eng, table: str, cfg: GateConfig, use_minimum: bool) -> dict[str, Any]:
    from .analyze.coverage import coverage_report, coverage_sets

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


# ================================================================== the gate
def _lake_name(lake) -> str:
    return str(lake) if isinstance(lake, (str, os.PathLike)) else "lake"


def _same_path(a, b) -> bool:
    if not isinstance(a, (str, os.PathLike)) or not isinstance(b, (str, os.PathLike)):
        return a is b
    try:
        return os.path.samefile(a, b)
    except OSError:  # a glob, or a path that does not exist (opening it reports that)
        return Path(a).resolve() == Path(b).resolve()


def _noop(_msg: str) -> None:
    pass


def run_gate(lake, config: GateConfig | None = None, *, baseline: str | None = None,
             candidate: str | None = None, baseline_lake=None, mode: str = "gate",
             progress: Callable[[str], None] | None = None) -> GateResult:
    """Judge ``candidate`` against ``baseline`` and decide deploy / block / manual.

    ``lake`` and ``baseline_lake`` are lake directories (or glob / file list, or an open
    :class:`~otel_assay.analyze.engine.Engine`). ``baseline`` / ``candidate`` are selectors
    ``key=value[,key=value]`` over the trials (version, scenario, run, model, outcome). With
    ``baseline_lake`` the baseline comes from that lake (a stored baseline, paper §7.3) and
    each selector defaults to all trials of its lake; otherwise, with no selectors, a lake
    holding exactly two versions compares the older (baseline) with the newer.

    ``mode="regress"`` ignores the coverage minimum (exploration); ``mode="verdict"`` judges
    the candidate alone against the threshold (see :func:`run_verdict`).

    Raises :class:`UsageError` (bad selector or setting, exit 3) and :class:`DataError`
    (empty or corrupt lake, no matching trials, exit 4).
    """
    cfg = config or GateConfig()
    say = progress or _noop
    alone = mode == "verdict"
    if alone and cfg.threshold is None and not any(o.get("threshold") for o in cfg.scenarios.values()):
        raise UsageError("a verdict needs a threshold: pass --threshold (e.g. 0.85) or set threshold in the config")
    if alone:
        cfg = copy.deepcopy(cfg)
        cfg.checks.update(regression=False, fingerprint=False, stability=False)
    if baseline_lake is not None and _same_path(lake, baseline_lake):
        # two engines on one lake would take every trial for both arms (each selector defaults
        # to all trials of its lake) and skip the overlap check: read it as the one lake it is
        baseline_lake = None
    say("opening the lake")
    eng_c = _open(lake)
    eng_b = _open(baseline_lake) if baseline_lake is not None else eng_c
    try:
        return _run(eng_b, eng_c, cfg, baseline, candidate, baseline_lake is not None, _lake_name(lake),
                    _lake_name(baseline_lake) if baseline_lake is not None else _lake_name(lake), mode, say)
    finally:
        if isinstance(lake, (str, os.PathLike)):
            eng_c.close()
        if baseline_lake is not None and isinstance(baseline_lake, (str, os.PathLike)):
            eng_b.close()


def run_verdict(lake, config: GateConfig | None = None, *, select: str | None = None,
                progress: Callable[[str], None] | None = None) -> GateResult:
    """One version against the threshold θ (paper Def. 3.6): the pass-rate check alone, per
    scenario, with the suite verdict. Decision deploy = PASS, block = FAIL, manual = INCONCLUSIVE."""
    return run_gate(lake, config, candidate=select, mode="verdict", progress=progress)


def _run(eng_b, eng_c, cfg, baseline, candidate, separate, lake_c, lake_b, mode, say) -> GateResult:
    alone = mode == "verdict"
    say("computing trials")
    for eng in _lakes(eng_b, eng_c):
        eng.materialize(["steps", "trials"])
    _check_has_trials(eng_c, lake_c)
    if separate:
        _check_has_trials(eng_b, lake_b)
    if not alone:
        baseline, candidate = _default_selectors(eng_c, baseline, candidate, separate, lake_c)
    n_c = _select(eng_c, candidate, "candidate_trials", lake_c)
    n_b = None if alone else _select(eng_b, baseline, "baseline_trials", lake_b)
    if alone:
        # a verdict is about one version: pooled versions would judge a pass rate of none of them
        versions = eng_c.rows("SELECT version, count(*) FROM trials SEMI JOIN candidate_trials USING (trace_id) "
                              "GROUP BY version ORDER BY min(start_time_unix_nano), version")
        if len(versions) > 1:
            listing = ", ".join(f"{v} ({n} trials)" for v, n in versions)
            raise UsageError(f"the trials selected ({candidate or 'all trials'}) are of {len(versions)} versions: "
                             f"{listing}; a verdict judges one, so add version=... to --select "
                             "(e.g. --select version=" + f"{versions[-1][0]})")
    notes: list[str] = []
    if not alone and not separate:
        overlap = eng_c.rows("SELECT count(*) FROM candidate_trials SEMI JOIN baseline_trials USING (trace_id)")[0][0]
        if overlap:
            raise UsageError(f"the baseline ({baseline}) and candidate ({candidate}) selections share {overlap} "
                             "trials; make them disjoint (e.g. select different versions)")

    oracle_c = oracle_b = None
    if cfg.contracts or cfg.metamorphic:
        say("contracts")
        tools = _contract_tools(eng_c, None if alone else eng_b, cfg)
        oracle_c = _oracles(eng_c, "candidate_trials", cfg, tools)
        oracle_b = None if alone else _oracles(eng_b, "baseline_trials", cfg, tools, required=False)
        if oracle_b is not None and oracle_b.missing:
            notes.append(f"metamorphic relations are judged on the candidate only, without the baseline's share "
                         f"alongside: {oracle_b.missing}")
    cols_c = _arm_trials(eng_c, "candidate_trials")
    cols_b = None if alone else _arm_trials(eng_b, "baseline_trials")
    if separate:
        # a baseline lake that is a copy of the lake (or holds the candidate's trials) would
        # compare trials with themselves; within one lake the check above catches this
        shared = len(set(cols_c["trace_id"].tolist()) & set(cols_b["trace_id"].tolist()))
        if shared:
            raise UsageError(f"the baseline ({lake_b}: {baseline or 'all trials'}) and the candidate ({lake_c}: "
                             f"{candidate or 'all trials'}) share {shared} trials (the same trace ids); select "
                             "disjoint trials with --baseline / --candidate, or give a baseline lake without the "
                             "candidate's trials")
    if cfg.outcome_from_contracts:
        filled = _outcomes_from_contracts(cols_c, oracle_c, cfg)
        if cols_b is not None:
            filled += _outcomes_from_contracts(cols_b, oracle_b, cfg)
        if filled:
            notes.append(f"{filled} trials without a recorded outcome took it from the contracts "
                         f"{', '.join(cfg.outcome_from_contracts)} (pass when all hold)")
    arms_c = _arms(cols_c)
    arms_b = {} if alone else _arms(cols_b)
    stab_c = _stability(eng_c, "candidate_trials", cfg.stability_floor)
    stab_b = {} if alone else _stability(eng_b, "baseline_trials", cfg.stability_floor)

    results = []
    for sc in sorted(set(arms_c) | set(arms_b)):
        s = cfg.for_scenario(sc)
        cand = _arm_summary(arms_c[sc], cfg.alpha) if sc in arms_c else Arm()
        cand.stability = stab_c.get(sc)
        base = None
        if not alone:
            base = _arm_summary(arms_b[sc], cfg.alpha) if sc in arms_b else Arm()
            base.stability = stab_b.get(sc)
        results.append(ScenarioResult(sc, base, cand, s))
    judged = {r.scenario for r in results}
    unknown_config = sorted(set(cfg.scenarios) - judged)
    if unknown_config:
        notes.append(f"config overrides for scenarios with no trials: {', '.join(unknown_config)}")
    for c in cfg.contracts:
        if c.scenarios and not set(c.scenarios) & judged:
            notes.append(f"contract {c.name!r} is scoped to scenarios with no trials ({', '.join(c.scenarios)}): "
                         "it judged nothing")

    plots: dict[str, Any] = {}
    # the FAIL tests of every gating check in every scenario: corrected as one family below
    family = _Family(cfg.alpha, cfg.correction)
    say("pass rates")
    _pass_rate_checks(results, cfg, family)
    if not alone:
        say("regression tests")
        _regression_checks(results, arms_b, arms_c, cfg, family)
    if oracle_c is not None:
        # before the fingerprints, whose permutation count depends on the family's size
        _oracle_checks(results, oracle_b, oracle_c, cfg, family)
    if not alone:
        if any(r.settings.checks["fingerprint"] for r in results):
            say("fingerprints")
            fp_b, fp_c = _fingerprint_tables(eng_b, eng_c, "baseline_trials", "candidate_trials")
            complete_b, left_b = _complete_trials(arms_b)
            complete_c, left_c = _complete_trials(arms_c)
            if left_b or left_c:
                notes.append(f"fingerprint test leaves out trials that stopped before completing (interrupted, "
                             f"or a stream the caller stopped): {left_b} baseline, {left_c} candidate; their "
                             "behaviour is cut short, not changed")
            notes += _fingerprint_checks(results, fp_b, fp_c, complete_b, complete_c, cfg, plots, say, family)
        _stability_checks(results, cfg.stability_floor)
    family_info = family.correct()
    for r in results:
        r.checks.sort(key=lambda c: CHECKS.index(c.name))  # the report's order, whatever ran first
    if alone:
        for r in results:
            if r.check("pass_rate") is None:
                why = ("no threshold for this scenario" if r.settings.checks["pass_rate"] else
                       "turned off for this scenario (checks.pass_rate: false in the config)")
                r.checks.append(Check("pass_rate", SKIPPED, why, gating=False))

    plots["sprt"] = _sprt_paths(results, arms_c, cfg)
    coverage = None
    if not alone:
        say("coverage")
        coverage = _coverage(eng_c, "candidate_trials", cfg, use_minimum=(mode == "gate"))

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

    suite = {}
    for name in CHECKS:
        vs = [c.verdict for r in results for c in r.checks if c.name == name and c.gating and c.verdict != SKIPPED]
        if vs:
            sv = stats.suite_verdict(vs)
            suite[name] = {"verdict": sv.verdict.value, "pass": sv.n_pass, "fail": sv.n_fail,
                           "inconclusive": sv.n_inconclusive}
    decision, reasons = _decide(results, suite, coverage)
    return GateResult(
        mode=mode, config=cfg,
        baseline=None if alone else {"lake": lake_b, "selection": baseline or "(all trials)", "trials": n_b},
        candidate={"lake": lake_c, "selection": candidate or "(all trials)", "trials": n_c},
        scenarios=results, suite=suite, coverage=coverage, decision=decision, reasons=reasons, notes=notes,
        plots=plots, family=family_info)


# ================================================================== contracts and relations
@dataclass
class _Oracles:
    contracts: Any = None            # oracles.contracts.ContractResults
    pairs: list | None = None        # oracles.metamorphic pair dicts
    missing: str | None = None       # why the pairs are not there (an arm that need not have them)


def _contract_tools(eng_c, eng_b, cfg: GateConfig) -> set[str] | None:
    """Tools either arm's lake has seen: what contract tool names are checked against."""
    from .oracles.contracts import TOOL_KINDS, known_tools

    if not any(c.kind in TOOL_KINDS for c in cfg.contracts or ()):
        return None  # no contract names a tool: nothing to check them against

    tools = known_tools(eng_c)
    if eng_b is not None and eng_b is not eng_c:
        tools |= known_tools(eng_b)
    return tools


def _oracles(eng, table: str, cfg: GateConfig, tools: set[str] | None = None, *, required: bool = True) -> _Oracles:
    """Contracts and metamorphic relations judged on one arm's recorded trials.

    ``required=False`` (the baseline: its share is reported, it gates nothing): an arm
    without follow-up trials, such as a stored baseline recorded before the relation was
    configured, is noted in ``missing`` instead of stopping the gate."""
    from .oracles.contracts import ContractError, check_names, evaluate
    from .oracles.metamorphic import RelationDataError, evaluate as evaluate_relations

    eng.rows(f"CREATE OR REPLACE TEMP TABLE {table}_rows AS SELECT * FROM trials SEMI JOIN {table} USING (trace_id)")
    out = _Oracles()
    try:
        if cfg.contracts:
            check_names(eng, cfg.contracts, scenarios=False, tools=tools)
            out.contracts = evaluate(eng, cfg.contracts, trials=f"{table}_rows")
        if cfg.metamorphic:
            out.pairs = evaluate_relations(eng, cfg.metamorphic, trials=f"{table}_rows")
    except ContractError as e:
        raise UsageError(f"{cfg.source}: {e}") from None
    except RelationDataError as e:
        if required:
            raise DataError(f"{table.replace('_', ' ')}: {e}") from None
        out.missing = f"{table.replace('_', ' ')}: {e}"
    return out


def _outcomes_from_contracts(cols: dict[str, np.ndarray], oracle: _Oracles, cfg: GateConfig) -> int:
    """Fill unknown outcomes of counted trials from the named contracts; return how many."""
    from .oracles.contracts import outcome_from_contracts

    derived = outcome_from_contracts(oracle.contracts, cfg.outcome_from_contracts)
    passed = cols["passed"].astype(object)
    n = 0
    for i, (tid, counted) in enumerate(zip(cols["trace_id"], cols["counted"])):
        p = passed[i]
        if counted and (p is None or p != p) and derived.get(str(tid)) is not None:
            passed[i] = derived[str(tid)]
            n += 1
    cols["passed"] = passed
    return n


def _counts(holds_by_scenario: dict, scenario: str, name: str) -> tuple[int, int, int]:
    """(trials judged, trials where it holds, trials it could not judge) of one scenario."""
    values = holds_by_scenario.get(scenario, {}).get(name, [])
    judged = [v for v in values if v is not None]
    return len(judged), sum(judged), len(values) - len(judged)


def _group(scenarios: list, columns: dict[str, list]) -> dict[str, dict[str, list]]:
    out: dict[str, dict[str, list]] = {}
    for i, sc in enumerate(scenarios):
        per = out.setdefault(sc, {})
        for name, values in columns.items():
            per.setdefault(name, []).append(values[i])
    return out


def _oracle_checks(results: list[ScenarioResult], oracle_b: _Oracles | None, oracle_c: _Oracles,
                   cfg: GateConfig, family: _Family) -> None:
    """Per scenario, a ``contracts`` and a ``metamorphic`` check from the candidate's trials.

    Each contract (relation) must hold in at least its threshold share of the candidate's
    trials (pairs), by the pass-rate verdict (paper Def. 3.6). PASS: the verdict at level
    alpha / k for the k contracts (relations) of the scenario, alpha the smallest of theirs.
    FAIL: each contract's FAIL p-value is one test of the suite's family (_Family), so the
    contracts of every scenario share the correction with the other checks; a contract with
    an alpha below the suite's has its p-value scaled up by suite alpha / its alpha, which
    holds it to its own level (a larger alpha cannot loosen the suite's). The check PASSes
    when every one PASSes and FAILs when any FAILs. The regression verdict against the
    baseline's share is reported alongside (paper Prop. 6.1), not gating.
    """
    def tables(o: _Oracles | None, kind: str):
        if o is None:
            return None
        if kind == "contracts" and o.contracts is not None:
            t = o.contracts.table
            return _group(t.column("scenario").to_pylist(),
                          {c.name: o.contracts.holds(c.name) for c in cfg.contracts})
        if kind == "metamorphic" and o.pairs is not None:
            # each relation over its own pairs: another relation's pairs are not its unjudged ones
            out: dict[str, dict[str, list]] = {}
            for rel in cfg.metamorphic:
                mine = [p for p in o.pairs if p["relation"] == rel.name]
                for sc, per in _group([p["scenario"] for p in mine], {rel.name: [p["holds"] for p in mine]}).items():
                    out.setdefault(sc, {}).update(per)
            return out
        return None

    for kind, items in (("contracts", cfg.contracts), ("metamorphic", cfg.metamorphic)):
        cand, base = tables(oracle_c, kind), tables(oracle_b, kind)
        if cand is None:
            continue
        for r in results:
            if not r.settings.checks.get(kind, True):
                r.checks.append(Check(kind, SKIPPED, "turned off for this scenario", gating=False))
                continue
            applicable = [it for it in items if getattr(it, "applies_to", lambda s: True)(r.scenario)]
            if r.candidate.trials == 0:
                # only the baseline ran it: open, as in _pass_rate_checks (no check at all left a
                # candidate that dropped the scenario to deploy when these were the gating checks)
                if applicable:
                    r.checks.append(Check(kind, INCONCLUSIVE, "the candidate did not run this scenario"))
                continue
            judged = [it for it in applicable if _counts(cand, r.scenario, it.name)[0] > 0]
            # configured but judged in no trial (an unpriced model, text not recorded): say so,
            # rather than leave the user to think it held
            blind = [f"{it.name} ({_counts(cand, r.scenario, it.name)[2]} trials)" for it in applicable
                     if it not in judged and _counts(cand, r.scenario, it.name)[2]]
            blind_note = f"no trial could be judged by {', '.join(blind)}" if blind else ""
            if not judged:
                if blind:
                    r.checks.append(Check(kind, SKIPPED, blind_note, gating=False))
                continue
            level = min(it.alpha for it in judged) / len(judged)
            tested, detail = [], {}
            for it in judged:
                n, k, unknown = _counts(cand, r.scenario, it.name)
                v = stats.verdict(k, n, it.threshold, level)
                p = min(1.0, v.pvalue_fail * max(1.0, cfg.alpha / it.alpha))
                entry = {"holds": k, "n": n, "unjudged": unknown, "rate": k / n, "ci_low": v.ci.low,
                         "ci_high": v.ci.high, "threshold": it.threshold, "verdict": v.verdict.value,
                         "pvalue": p, "pvalue_adjusted": None}
                if base is not None:
                    nb, kb, _u = _counts(base, r.scenario, it.name)
                    if nb:
                        reg = stats.regression_verdict(kb, nb, k, n, delta=r.settings.delta, alpha=level)
                        entry["baseline"] = {"holds": kb, "n": nb, "regression": reg.verdict.value,
                                             "pvalue": reg.pvalue}
                detail[it.name] = entry
                tested.append((it, v, p))
            check = Check(kind, INCONCLUSIVE, "", stats={"level": level, kind: detail})
            r.checks.append(check)

            def finish(adjusted, check=check, tested=tested, detail=detail, kind=kind, blind_note=blind_note):
                verdicts, reasons = [], []
                tag = family.adjusted_tag()
                for (it, v, p), p_adj in zip(tested, adjusted):
                    entry = detail[it.name]
                    entry["pvalue_adjusted"] = p_adj
                    k, n = v.successes, v.n
                    if v.verdict is stats.Verdict.PASS:
                        verdict = PASS
                    elif p_adj < cfg.alpha:
                        verdict = FAIL
                        reasons.append(f"{it.name} FAIL ({k}/{n} hold, below threshold {it.threshold}: "
                                       f"{tag}p={p_adj:.3g} < alpha={cfg.alpha})")
                    else:
                        verdict = INCONCLUSIVE
                        if v.verdict is stats.Verdict.FAIL:
                            why = (f"upper bound {v.ci.high:.3f} < threshold {it.threshold} but not after "
                                   f"{family.describe()} (adjusted p={p_adj:.3g})")
                        else:
                            why = _rate_reason(v, "includes")
                            if v.ci.low < it.threshold <= v.ci.high:
                                why += "; more trials would decide"
                        reasons.append(f"{it.name} INCONCLUSIVE ({k}/{n} hold, {why})")
                    entry["verdict"] = verdict
                    verdicts.append(verdict)
                check.verdict = stats.suite_verdict(verdicts).verdict.value
                what = "contracts" if kind == "contracts" else "relations"
                check.reason = "; ".join(reasons) if reasons else f"all {len(tested)} {what} hold often enough"
                if blind_note:
                    check.reason += f"; {blind_note}"

            family.add(check, [p for _it, _v, p in tested], finish)


def _decide(results: list[ScenarioResult], suite: dict, coverage: dict | None) -> tuple[str, list[str]]:
    """Paper Def. 6.2: block on any FAIL; deploy when every gating check PASSes and coverage
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
