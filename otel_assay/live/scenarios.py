"""Scenario files: what to run, how to judge each trial, and how many trials to spend.

The shape follows the AgentAssay paper's test specification format::

    name: ticket_routing
    agent: myapp.agents:route            # optional; `--agent` overrides
    config:                              # defaults for every scenario
      trials: 50                         # fixed: trials per scenario; sprt: n_max unless given
      threshold: 0.85                    # required pass rate (H0: p >= threshold)
      alpha: 0.05
      beta: 0.10
      delta: 0.10                        # SPRT H1: p <= threshold - delta; regression effect size
      method: sprt                       # fixed | sprt | adaptive
      n_max: 200                         # SPRT truncation (default: trials)
      t_max: 600                         # wall-clock seconds for the whole run
      budget: {tokens: 200000, dollars: 5.0}
      timeout: 30                        # seconds per trial
      retries: 2                         # re-runs of a trial that hit an infrastructure error
      calibration: 10                    # adaptive: calibration trials per scenario
    scenarios:
      - name: billing
        input: "My payment failed"
        properties:                      # a mapping or the paper's list of one-key mappings
          - expected_department: billing
          - max_steps: 5
        evaluator: exact_match           # or {type: regex, pattern: ...}, or "module:function"
        config: {threshold: 0.9}         # per-scenario overrides

Evaluators: ``exact_match``, ``contains``, ``regex``, ``json_schema``, ``callable``
(``module:function``, called as ``fn(output, scenario)``) and ``none`` (only the step
properties judge). Step properties checked from the trial's own spans: ``max_steps``,
``max_tool_calls``, ``must_call``, ``never_call``. Other property keys are refused (a typo
would judge nothing), except ``expected`` / ``expected_<field>`` and, with a callable
evaluator, keys of its own that are not spelt like a known one; so are keys an evaluator
mapping does not take.

Errors are :class:`~otel_assay.errors.UsageError` (exit 3) naming the file and the item.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import os
import re
import sys
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from ..errors import UsageError
from ..oracles.contracts import checked_validator, closed_validator, parse_contracts

METHODS = ("fixed", "sprt", "adaptive")
EVALUATORS = ("exact_match", "contains", "regex", "json_schema", "callable", "contract", "none")
LIVE_CONTRACT_KINDS = ("max_steps", "max_tool_calls", "must_call", "never_call", "call_order", "max_tokens",
                       "max_latency_s", "final_output_matches", "final_output_contains", "final_output_json_schema")
STEP_PROPERTIES = ("max_steps", "max_tool_calls", "must_call", "never_call")
# an evaluator mapping's keys besides `type`
EVALUATOR_KEYS = {"exact_match": ("expected", "ignore_case"), "contains": ("value", "ignore_case"),
                  "regex": ("pattern", "ignore_case"), "json_schema": ("schema",), "callable": ("function", "callable"),
                  "contract": ("contracts",), "none": ()}
CONFIG_KEYS = ("trials", "threshold", "alpha", "beta", "delta", "method", "n_max", "t_max", "budget",
               "timeout", "retries", "calibration", "concurrency", "regression")


@dataclass(frozen=True)
class RunConfig:
    trials: int = 50
    threshold: float = 0.85
    alpha: float = 0.05
    beta: float = 0.10
    delta: float = 0.10
    method: str = "sprt"
    n_max: int | None = None
    t_max: float | None = None
    budget_tokens: int | None = None
    budget_dollars: float | None = None
    timeout: float | None = None
    retries: int = 2
    calibration: int = 10
    concurrency: int | None = None

    @property
    def sprt_n_max(self) -> int:
        return self.n_max if self.n_max is not None else self.trials


@dataclass
class Scenario:
    name: str
    input: Any
    properties: dict[str, Any]
    evaluator: "Evaluator"
    config: RunConfig

    def judge(self, output: Any, steps: "StepFacts | None" = None) -> tuple[bool, float | None, str | None]:
        """(passed, score, reason) for one trial's output and its recorded steps."""
        if getattr(self.evaluator, "needs_facts", False):
            passed, score, reason = self.evaluator(output, self, steps or StepFacts())
        else:
            passed, score, reason = self.evaluator(output, self)
        if passed and steps is not None:
            bad = steps.violations(self.properties)
            if bad:
                return False, score, bad
        return passed, score, reason


@dataclass
class Suite:
    name: str
    scenarios: list[Scenario]
    config: RunConfig
    agent: str | None = None
    source: str = "<scenarios>"
    baseline: str | None = None


@dataclass
class StepFacts:
    """What the trial's spans show: step count, tool calls, tokens (filled by the runner)."""

    n_steps: int = 0
    n_llm: int = 0
    tools: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def violations(self, props: Mapping[str, Any]) -> str | None:
        if "max_steps" in props and self.n_steps > props["max_steps"]:
            return f"{self.n_steps} steps > max_steps {props['max_steps']}"
        if "max_tool_calls" in props and len(self.tools) > props["max_tool_calls"]:
            return f"{len(self.tools)} tool calls > max_tool_calls {props['max_tool_calls']}"
        for t in _names(props.get("must_call")):
            if t not in self.tools:
                return f"did not call {t} (must_call)"
        for t in _names(props.get("never_call")):
            if t in self.tools:
                return f"called {t} (never_call)"
        return None


def _names(v) -> list[str]:
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)


# ------------------------------------------------------------------ import helpers
def import_object(spec: str, what: str) -> Any:
    """``module:attr`` (or ``path/to/file.py:attr``) -> the object; UsageError naming ``what``."""
    if not isinstance(spec, str) or ":" not in spec:
        raise UsageError(f"{what} {spec!r}: give module:callable, e.g. myapp.agent:run")
    mod_name, _, attr = spec.rpartition(":")
    if not mod_name or not attr:
        raise UsageError(f"{what} {spec!r}: give module:callable, e.g. myapp.agent:run")
    try:
        if mod_name.endswith(".py") or os.sep in mod_name:
            path = os.path.abspath(mod_name)
            if not os.path.isfile(path):
                raise UsageError(f"{what} {spec!r}: no file {mod_name}")
            name = "_otel_assay_user_" + re.sub(r"\W", "_", path)
            module = sys.modules.get(name)
            if module is None:
                sp = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(sp)
                sys.modules[name] = module
                sp.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(mod_name)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - any import failure is the user's module
        raise UsageError(f"{what} {spec!r}: cannot import {mod_name}: {type(e).__name__}: {e}") from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{what} {spec!r}: module {mod_name} has no attribute {attr}") from None
    if not callable(obj):
        raise UsageError(f"{what} {spec!r}: {attr} is not callable")
    return obj


# ------------------------------------------------------------------ evaluators
Evaluator = Callable[[Any, Scenario], tuple[bool, "float | None", "str | None"]]


def _expected(spec: Mapping, props: Mapping, where: str, key: str = "expected"):
    if key in spec:
        return spec[key], None
    if "expected" in props:
        return props["expected"], None
    cands = [k for k in props if k.startswith("expected_")]
    if len(cands) == 1:
        return props[cands[0]], cands[0][len("expected_"):]
    raise UsageError(f"{where}: the evaluator needs an expected value: set `{key}:` in the evaluator "
                     "or one `expected` / `expected_<field>` property")


def _field(output, fld):
    if fld is not None and isinstance(output, Mapping) and fld in output:
        return output[fld]
    return output


def _text(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def _from_callable(fn) -> Evaluator:
    def ev(output, scenario):
        r = fn(output, scenario)
        if isinstance(r, tuple):
            passed, score = r[0], (r[1] if len(r) > 1 else None)
            return bool(passed), None if score is None else float(score), None
        if isinstance(r, Mapping):
            return bool(r.get("passed")), r.get("score"), r.get("reason")
        if isinstance(r, bool) or r is None:
            return bool(r), None, None
        if isinstance(r, (int, float)):
            return float(r) >= 0.5, float(r), None
        raise TypeError(f"evaluator returned {type(r).__name__}; return a bool, (bool, score) or a dict")
    return ev


def make_evaluator(spec: Any, props: Mapping, where: str) -> Evaluator:
    if spec is None:
        spec = "exact_match" if any(k == "expected" or k.startswith("expected_") for k in props) else "none"
    if isinstance(spec, str):
        if ":" in spec and spec not in EVALUATORS:
            return _from_callable(import_object(spec, f"{where}: evaluator"))
        spec = {"type": spec}
    if not isinstance(spec, Mapping) or "type" not in spec:
        raise UsageError(f"{where}: evaluator must be a name ({', '.join(EVALUATORS)}), module:function "
                         "or a mapping with `type:`")
    kind = str(spec["type"]).replace("-", "_")
    if kind == "exact":
        kind = "exact_match"
    if kind not in EVALUATORS:
        raise UsageError(f"{where}: unknown evaluator {spec['type']!r}; use one of {', '.join(EVALUATORS)} "
                         "or module:function")
    # a misspelt option (`ignore_cas: false`, `patern:`) was ignored: the evaluator judged without it
    unknown = [k for k in spec if k != "type" and k not in EVALUATOR_KEYS[kind]]
    if unknown:
        hint = _did_you_mean(unknown[0], EVALUATOR_KEYS[kind])
        raise UsageError(f"{where}: evaluator {kind}: unknown key {unknown[0]!r}{hint}; "
                         f"its keys: {', '.join(('type', *EVALUATOR_KEYS[kind]))}")
    if kind == "none":
        return lambda output, scenario: (True, None, None)
    if kind == "contract":
        return _contract_evaluator(spec, where)
    if kind == "callable":
        target = spec.get("function") or spec.get("callable")
        return _from_callable(import_object(target, f"{where}: evaluator"))
    if kind == "exact_match":
        exp, fld = _expected(spec, props, where)
        ci = bool(spec.get("ignore_case", False))

        def exact(output, scenario):
            got = _field(output, fld)
            if isinstance(got, str) and isinstance(exp, str):
                a, b = got.strip(), exp.strip()
                ok = a.lower() == b.lower() if ci else a == b
            else:
                ok = got == exp
            return ok, None, None if ok else f"expected {exp!r}, got {_text(got)[:80]!r}"
        return exact
    if kind == "contains":
        exp, fld = _expected(spec, props, where, "value")
        needles = _names(exp)
        ci = bool(spec.get("ignore_case", True))

        def contains(output, scenario):
            text = _text(_field(output, fld))
            hay = text.lower() if ci else text
            missing = [n for n in needles if (str(n).lower() if ci else str(n)) not in hay]
            return not missing, None, None if not missing else f"missing {missing[0]!r}"
        return contains
    if kind == "regex":
        pat, fld = _expected(spec, props, where, "pattern")
        try:
            rx = re.compile(str(pat), re.IGNORECASE if spec.get("ignore_case") else 0)
        except re.error as e:
            raise UsageError(f"{where}: regex {pat!r} does not compile: {e}") from None

        def regex(output, scenario):
            ok = rx.search(_text(_field(output, fld))) is not None
            return ok, None, None if ok else f"no match for {pat!r}"
        return regex
    # json_schema
    schema, _ = _expected(spec, props, where, "schema")
    validator = checked_validator(schema, where)  # a ContractError is a UsageError: exit 3

    def json_schema(output, scenario):
        doc = output
        if isinstance(output, (str, bytes)):
            try:
                doc = json.loads(output)
            except ValueError:
                return False, None, "output is not JSON"
        err = next(iter(validator.iter_errors(doc)), None)
        return err is None, None, None if err is None else err.message[:120]
    return json_schema


def _contract_evaluator(spec: Mapping, where: str) -> Evaluator:
    """The oracle's contracts (otel_assay.oracles.contracts) judged live on each trial: the
    trial passes when every contract holds. Kinds that need the recorded trace in the lake
    (cost, tool errors, argument schemas, repeated calls, sql) are for `otel-assay gate`."""
    contracts = parse_contracts(spec.get("contracts"), where=f"{where}: contracts")
    if not contracts:
        raise UsageError(f"{where}: a contract evaluator needs `contracts:` (a list like [{{must_call: lookup}}])")
    for c in contracts:
        if c.kind not in LIVE_CONTRACT_KINDS:
            raise UsageError(f"{where}: contract {c.name!r} ({c.kind}) is judged on the lake by `otel-assay gate`; "
                             f"live evaluators support {', '.join(LIVE_CONTRACT_KINDS)}")
    # imported here: @stochastic loads this module while pytest collects a user's tests;
    # duckdb (0.16 s) is needed only by suites with contracts
    import duckdb

    # final_output_matches is RE2, as in the lake (the pattern was checked with it): Python's re
    # rejected RE2 patterns such as `\z` or `\pL` at the first trial (exit 3 after paying for it),
    # read `$` differently, and a pattern like `(a+)+$` backtracked without end on an output,
    # past the trial's timeout. One connection per evaluator; trials may be judged in threads
    re2, re2_lock = duckdb.connect(), threading.Lock()

    def re2_search(pattern: str, text: str) -> bool:
        with re2_lock:
            return bool(re2.execute("SELECT regexp_matches(?, ?)", [text, pattern]).fetchone()[0])

    def holds(c, output, f: StepFacts) -> bool:
        v, text = c.value, _text(output)
        if c.kind == "max_steps":
            return f.n_steps <= v
        if c.kind == "max_tool_calls":
            return len(f.tools) <= v
        if c.kind == "must_call":
            return all(t in f.tools for t in v)
        if c.kind == "never_call":
            return not any(t in f.tools for t in v)
        if c.kind == "call_order":
            it = iter(f.tools)
            return all(any(x == t for x in it) for t in v)
        if c.kind == "max_tokens":
            return f.tokens <= v
        if c.kind == "max_latency_s":
            return f.duration_s <= v
        if c.kind == "final_output_matches":
            return re2_search(v, text)
        if c.kind == "final_output_contains":
            return str(v) in text
        doc = output
        if isinstance(output, (str, bytes)):
            try:
                doc = json.loads(output)
            except ValueError:
                return False
        return closed_validator(v).is_valid(doc)

    def ev(output, scenario, facts):
        for c in contracts:
            if not holds(c, output, facts):
                return False, None, f"contract {c.name} ({c.kind}) violated"
        return True, None, None
    ev.needs_facts = True
    return ev


# ------------------------------------------------------------------ config
def _num(where, key, v, lo=None, hi=None, integer=False, open_lo=True):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise UsageError(f"{where}: {key} must be a number, got {v!r}")
    if integer and int(v) != v:
        raise UsageError(f"{where}: {key} must be an integer, got {v!r}")
    if lo is not None and (v <= lo if open_lo else v < lo):
        raise UsageError(f"{where}: {key} must be {'>' if open_lo else '>='} {lo}, got {v!r}")
    if hi is not None and v >= hi:
        raise UsageError(f"{where}: {key} must be < {hi}, got {v!r}")
    return int(v) if integer else float(v)


def parse_config(raw: Any, where: str, base: RunConfig | None = None) -> RunConfig:
    cfg = base or RunConfig()
    if raw is None:
        return cfg
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where}: config must be a mapping")
    unknown = sorted(set(raw) - set(CONFIG_KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown config key {unknown[0]!r}; known: {', '.join(CONFIG_KEYS)}")
    kw: dict[str, Any] = {}
    for key in ("threshold", "alpha", "beta", "delta"):
        if key in raw:
            kw[key] = _num(where, key, raw[key], 0, 1)
    if "trials" in raw:
        kw["trials"] = _num(where, "trials", raw["trials"], 0, integer=True)
    if "n_max" in raw and raw["n_max"] is not None:
        kw["n_max"] = _num(where, "n_max", raw["n_max"], 0, integer=True)
    if "calibration" in raw:
        kw["calibration"] = _num(where, "calibration", raw["calibration"], 1, integer=True)
    if "retries" in raw:
        kw["retries"] = _num(where, "retries", raw["retries"], 0, integer=True, open_lo=False)
    if "concurrency" in raw and raw["concurrency"] is not None:
        kw["concurrency"] = _num(where, "concurrency", raw["concurrency"], 0, integer=True)
    for key in ("t_max", "timeout"):
        if key in raw and raw[key] is not None:
            kw[key] = _num(where, key, raw[key], 0)
    if "method" in raw:
        m = str(raw["method"]).lower()
        if m not in METHODS:
            raise UsageError(f"{where}: method {raw['method']!r}: use one of {', '.join(METHODS)}")
        kw["method"] = m
    if "budget" in raw and raw["budget"] is not None:
        b = raw["budget"]
        if not isinstance(b, Mapping) or not set(b) <= {"tokens", "dollars"}:
            raise UsageError(f"{where}: budget must be a mapping with tokens and/or dollars")
        if b.get("tokens") is not None:
            kw["budget_tokens"] = _num(where, "budget.tokens", b["tokens"], 0, integer=True)
        if b.get("dollars") is not None:
            kw["budget_dollars"] = _num(where, "budget.dollars", b["dollars"], 0)
    if "regression" in raw and isinstance(raw["regression"], Mapping) and "delta" in raw["regression"]:
        kw["delta"] = _num(where, "regression.delta", raw["regression"]["delta"], 0, 1)
    cfg = replace(cfg, **kw)
    if cfg.threshold - cfg.delta <= 0:
        raise UsageError(f"{where}: threshold - delta must be > 0 (threshold={cfg.threshold}, delta={cfg.delta})")
    if cfg.alpha + cfg.beta >= 1:
        raise UsageError(f"{where}: alpha + beta must be < 1")
    return cfg


def _did_you_mean(key: Any, known) -> str:
    near = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.75)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _reads_properties(spec: Any) -> bool:
    """Whether the evaluator is the user's callable, which may read properties of its own
    from ``scenario.properties``."""
    if isinstance(spec, str):
        return ":" in spec and spec not in EVALUATORS
    return isinstance(spec, Mapping) and str(spec.get("type")).replace("-", "_") == "callable"


def _check_property_keys(props: Mapping, where: str, custom: bool) -> None:
    """A misspelt step property (`max_step: 5`, `must_cal: lookup`) judged nothing: every trial
    passed it. Known: the step properties, `expected` and `expected_<field>`; with a callable
    evaluator (``custom``) other keys are its own, unless they are spelt like a known one."""
    known = (*STEP_PROPERTIES, "expected")
    for k in props:
        if isinstance(k, str) and (k in known or k.startswith("expected_")):
            continue
        hint = _did_you_mean(k, known)
        if custom and not hint:
            continue
        own = ("" if custom else "; other keys are for a callable evaluator (evaluator: module:function), "
               "which reads them from scenario.properties")
        raise UsageError(f"{where}: unknown property {k!r}{hint}; properties: {', '.join(STEP_PROPERTIES)}, "
                         f"expected, expected_<field>{own}")


def _props(raw, where) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, list) and all(isinstance(p, Mapping) for p in raw):
        out: dict[str, Any] = {}
        for p in raw:
            out.update(p)
        return out
    raise UsageError(f"{where}: properties must be a mapping or a list of one-key mappings")


def parse_scenarios(doc: Any, source: str = "<scenarios>") -> Suite:
    """A parsed scenario document (the YAML loaded into Python) -> :class:`Suite`."""
    if not isinstance(doc, Mapping):
        raise UsageError(f"{source}: a scenario file is a mapping with `scenarios:` (and optional `config:`)")
    unknown = sorted(set(doc) - {"name", "description", "agent", "config", "scenarios", "baseline"})
    if unknown:
        raise UsageError(f"{source}: unknown top-level key {unknown[0]!r}")
    config = parse_config(doc.get("config"), f"{source}: config")
    raw = doc.get("scenarios")
    if not isinstance(raw, list) or not raw:
        raise UsageError(f"{source}: `scenarios:` must be a non-empty list")
    scenarios: list[Scenario] = []
    seen: set[str] = set()
    for i, s in enumerate(raw):
        where = f"{source}: scenarios[{i}]"
        if not isinstance(s, Mapping):
            raise UsageError(f"{where}: each scenario is a mapping with input and evaluator")
        bad = sorted(set(s) - {"name", "description", "input", "properties", "evaluator", "config"})
        if bad:
            raise UsageError(f"{where}: unknown key {bad[0]!r}")
        name = s.get("name") or f"{doc.get('name') or 'scenario'}-{i}"
        name = str(name)
        where = f"{source}: scenario {name!r}"
        if name in seen:
            raise UsageError(f"{where}: duplicate scenario name")
        seen.add(name)
        if "input" not in s:
            raise UsageError(f"{where}: missing `input`")
        props = _props(s.get("properties"), where)
        _check_property_keys(props, where, _reads_properties(s.get("evaluator")))
        for k in ("max_steps", "max_tool_calls"):
            if k in props:
                props[k] = _num(where, k, props[k], 0, integer=True, open_lo=False)
        for k in ("must_call", "never_call"):
            # checked here, not at the first trial: `must_call: 5` stopped the run after paying for
            # one ("the evaluator raised TypeError"), and an empty list held in every trial
            if k not in props:
                continue
            v = props[k]
            names = [v] if isinstance(v, str) else v
            if not isinstance(names, list) or not names or not all(isinstance(t, str) and t for t in names):
                raise UsageError(f"{where}: {k} must be a tool name or a non-empty list of tool names "
                                 f"(quote names YAML reads as numbers or booleans), got {v!r}")
        ev = make_evaluator(s.get("evaluator"), props, where)
        scenarios.append(Scenario(name, s["input"], props, ev, parse_config(s.get("config"), where, config)))
    agent = doc.get("agent")
    if agent is not None and (not isinstance(agent, str) or ":" not in agent):
        raise UsageError(f"{source}: agent must be module:callable, e.g. myapp.agent:run, got {agent!r}")
    baseline = doc.get("baseline")
    if baseline is not None and (not isinstance(baseline, str) or not baseline.strip()):
        raise UsageError(f"{source}: baseline must be a selector string such as 'version=v1', got {baseline!r}")
    return Suite(str(doc.get("name") or os.path.splitext(os.path.basename(source))[0]), scenarios, config,
                 agent=agent or None, source=source,
                 baseline=baseline)


def load_scenarios(path: str | os.PathLike) -> Suite:
    """Read and validate a scenario file (YAML, ``safe_load``)."""
    # imported here: @stochastic loads this module while pytest collects a user's tests, which
    # configure it in Python; yaml (0.14 s) is for scenario files only
    import yaml

    from .. import yamlfile

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise UsageError(f"cannot read scenario file {path}: {e.strerror}") from None
    try:
        doc = yamlfile.load(text, str(path))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UsageError(f"{path}: not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
    return parse_scenarios(doc, str(path))
