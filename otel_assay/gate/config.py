"""The gate's configuration: what it can be told, and the YAML file that tells it.

Every key of the file is validated up front and every error names the key and its line:
a misspelt key that was silently ignored would gate with a default the user did not choose.
"""

from __future__ import annotations

import copy
import math
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .. import yamlfile
from ..errors import UsageError
from ..oracles.contracts import ContractError, parse_contracts
from ..oracles.metamorphic import parse_relations
from ..stats.coverage import DEFAULT_STATE_LAMBDA

CHECKS = ("pass_rate", "regression", "fingerprint", "stability", "contracts", "metamorphic")
CORRECTIONS = ("holm", "bonferroni", "bh", "by", "none")
COVERAGE_DIMENSIONS = ("tool", "path", "state", "boundary", "model")

# Wall-clock latency differs between machines and days with no change to the agent; with a
# stored baseline it would make the fingerprint test block every run.
DEFAULT_EXCLUDED_FEATURES = ("latency_s",)


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
    block_any_shift: bool = False
    stability_floor: float = 0.5
    coverage_tools: tuple[str, ...] = ()
    coverage_models: tuple[str, ...] = ()
    coverage_weights: dict[str, float] | None = None
    state_lambda: float = DEFAULT_STATE_LAMBDA
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
                            "seed": self.seed, "block_any_shift": self.block_any_shift},
            "stability": {"floor": self.stability_floor},
            "coverage": {"tools": list(self.coverage_tools), "models": list(self.coverage_models),
                         "weights": self.coverage_weights, "state_lambda": self.state_lambda},
            "scenarios": copy.deepcopy(self.scenarios),
        }


# The commented file `otel-assay init` writes; its values are GateConfig's defaults.
STARTER_CONFIG = (resources.files(__package__) / "starter.yaml").read_text(encoding="utf-8")


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
    loc = _Located(source)
    try:
        node = yamlfile.compose(text, source)
        if node is not None:
            loc.walk(node)  # before construct, which rewrites merge keys (<<) in the node
        data = yamlfile.construct(node, source)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UsageError(f"{where}: malformed YAML: {problem}; fix the syntax (run `otel-assay init` "
                         "for a valid starter file)") from None
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

    fp = _keys(loc, ("fingerprint",), data.get("fingerprint"), ("exclude", "permutations", "seed", "block_any_shift"))
    if "block_any_shift" in fp:
        if not isinstance(fp["block_any_shift"], bool):
            raise loc.error(("fingerprint", "block_any_shift"), f"must be true or false, got {fp['block_any_shift']!r}")
        cfg.block_any_shift = fp["block_any_shift"]
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


def with_overrides(cfg: GateConfig, *, threshold: float | None = None, alpha: float | None = None,
                   delta: float | None = None) -> GateConfig:
    """``cfg`` with the values given on the command line. They beat the whole config file,
    its per-scenario values included: a flag that some scenarios ignored would gate them
    with a value the user just overrode."""
    if alpha is not None:
        cfg.alpha = alpha
    for key, value in (("threshold", threshold), ("delta", delta)):
        if value is not None:
            setattr(cfg, key, value)
            for over in cfg.scenarios.values():
                over.pop(key, None)
    return cfg
