"""Coverage inputs (for the AgentAssay paper's five coverage dimensions): the sets the
coverage metrics need, read from the views, and the coverage report computed from them by
:mod:`otel_assay.stats.coverage`.

- tools used (tool steps) vs tools available (configured, else the tool definitions
  recorded on LLM spans: ``tool_definitions``);
- decision paths with the number of trials that took each (``decision_paths``; Chao1);
- abstract states with their visit counts (``step_states``, per trial ``abstract_states``);
- tool-argument boundary hits: boundaries derived from the tools' parameter JSON schemas,
  tested against the recorded canonical arguments (``tool_arguments``);
- models tested (``models_used``) vs a configured target.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from ..stats.coverage import DEFAULT_STATE_LAMBDA, CoverageReport, agent_coverage

# a recorded number this close (relative) to a numeric bound hits it: a boundary is tested
# by a value at or near it, and a float that rounding moved off the bound still tested it
BOUNDARY_TOLERANCE = 1e-9

Boundary = tuple[str, str, str]  # (tool, parameter, boundary), e.g. ("search", "limit", "max=100")


@dataclass
class CoverageSets:
    tools_used: Counter = field(default_factory=Counter)          # tool -> calls
    tools_defined: set[str] = field(default_factory=set)          # from recorded tool definitions
    path_counts: Counter = field(default_factory=Counter)         # decision path -> trials
    state_counts: Counter = field(default_factory=Counter)        # abstract state -> visits
    boundaries: set[Boundary] = field(default_factory=set)
    boundaries_hit: set[Boundary] = field(default_factory=set)
    models_tested: Counter = field(default_factory=Counter)       # model -> LLM calls
    n_trials: int = 0


def _where(trials_table: str | None) -> str:
    return f"SEMI JOIN {trials_table} USING (trace_id)" if trials_table else ""


def coverage_sets(engine, trials_table: str | None = None) -> CoverageSets:
    """Read every coverage set for the trials in ``trials_table`` (all trials when None)."""
    with engine.steps_of(trials_table):
        return _coverage_sets(engine, trials_table)


def _coverage_sets(engine, trials_table: str | None) -> CoverageSets:
    w = _where(trials_table)
    q = engine.rows
    sets = CoverageSets()
    sets.n_trials = q(f"SELECT count(*) FROM trials {w}")[0][0]
    sets.tools_used = Counter(dict(q(f"SELECT tool_name, sum(calls)::BIGINT FROM fingerprint_tools {w} GROUP BY 1")))
    sets.path_counts = Counter(dict(q(f"SELECT path, count(*) FROM decision_paths {w} GROUP BY 1")))
    sets.state_counts = Counter(dict(q(f"SELECT state, count(*) FROM step_states {w} GROUP BY 1")))
    sets.models_tested = Counter(dict(q(f"SELECT model, sum(calls)::BIGINT FROM models_used {w} GROUP BY 1")))
    # the distinct texts of these trials, each parsed once (not one row per trial and tool)
    schemas = q(f"SELECT DISTINCT t.tool_name, t.parameters FROM (SELECT DISTINCT defs FROM tool_definition_texts {w}) "
                f"JOIN parsed_tool_definitions t USING (defs)")
    sets.tools_defined = {name for name, _ in schemas}
    tests: dict[str, dict[Boundary, Callable[[Any], bool]]] = {}
    for tool, params in schemas:
        if params:
            tests.setdefault(tool, {}).update(boundary_tests(tool, json.loads(params)))
    sets.boundaries = {b for t in tests.values() for b in t}
    if sets.boundaries:
        # each distinct argument text is decoded once, however often it was used
        rows = q(f"SELECT DISTINCT tool_name, tool_args FROM tool_arguments {w} "
                 f"WHERE tool_args IS NOT NULL AND list_contains(?, tool_name)", [sorted(tests)])
        for tool, args in rows:
            sets.boundaries_hit |= boundaries_hit(json.loads(args), tests[tool])
    return sets


def _param_boundaries(schema: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(boundary label, test) pairs of one parameter schema; a test is value -> bool."""
    out: list[tuple[str, Any]] = []
    types = schema.get("type")
    types = set(types) if isinstance(types, list) else {types} if types else set()

    def near(bound):
        return lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool)
                          and abs(v - bound) <= BOUNDARY_TOLERANCE * max(1.0, abs(bound)))

    for key, label in (("minimum", "min"), ("maximum", "max")):
        b = schema.get(key)
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            out.append((f"{label}={b}", near(b)))
    for key, label, step in (("exclusiveMinimum", "min", 1), ("exclusiveMaximum", "max", -1)):
        b = schema.get(key)
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            # the closest allowed value: the next integer for integers, the bound itself otherwise
            edge = b + step if "integer" in types else b
            out.append((f"{label}>{b}" if step > 0 else f"{label}<{b}", near(edge)))
    for key, label, fn in (("minLength", "minLength", len), ("maxLength", "maxLength", len),
                           ("minItems", "minItems", len), ("maxItems", "maxItems", len)):
        b = schema.get(key)
        if isinstance(b, int) and not isinstance(b, bool):
            kind = str if "Length" in key else list
            out.append((f"{label}={b}", lambda v, b=b, kind=kind: isinstance(v, kind) and len(v) == b))
    enum = schema.get("enum")
    if isinstance(enum, list):
        for e in enum:
            out.append((f"enum={json.dumps(e, sort_keys=True)}", lambda v, e=e: v == e and type(v) is type(e)))
    if "boolean" in types:
        out.append(("true", lambda v: v is True))
        out.append(("false", lambda v: v is False))
    # the empty value, unless a length limit already decides it: minLength/minItems 0 is that
    # very boundary (one value must not hit two), a larger one forbids it
    def limited(key):
        return isinstance(schema.get(key), int) and not isinstance(schema.get(key), bool)

    if "string" in types and not limited("minLength") and not isinstance(enum, list):
        out.append(("empty", lambda v: v == ""))
    if "array" in types and not limited("minItems"):
        out.append(("empty", lambda v: v == []))
    if "object" in types and not schema.get("properties"):
        out.append(("empty", lambda v: v == {}))
    return out


def boundary_tests(tool: str, schema: Any) -> dict[Boundary, Callable[[Any], bool]]:
    """The boundaries (the extremes of a parameter's domain, where tools tend to break) of a
    tool's parameter JSON schema (top-level properties), each with the test a recorded
    argument value must pass to hit it: min/max (inclusive and exclusive), length and
    item-count limits, every enum value, true/false, and the empty value where the schema
    allows it."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return {}
    return {(tool, name, label): test for name, p in schema["properties"].items() if isinstance(p, dict)
            for label, test in _param_boundaries(p)}


def boundaries_hit(args: Any, tests: Mapping[Boundary, Callable[[Any], bool]]) -> set[Boundary]:
    """Which boundaries one call's decoded arguments hit (``tests`` of that call's tool)."""
    if not isinstance(args, dict):
        return set()
    return {b for b, test in tests.items() if b[1] in args and test(args[b[1]])}


def coverage_report(sets: CoverageSets, *, tools_available: Iterable[str] | None = None,
                    models_target: Iterable[str] | None = None, state_lambda: float = DEFAULT_STATE_LAMBDA,
                    weights: Mapping[str, float] | None = None) -> CoverageReport:
    """The five coverage dimensions and the overall score (undefined dimensions n/a).

    Tools available: ``tools_available`` when given, else the recorded tool definitions.
    Models: n/a unless a target list is given (the lake cannot know which models you
    intend to support).
    """
    available = set(tools_available) if tools_available else sets.tools_defined
    return agent_coverage(
        tools_used=set(sets.tools_used), tools_available=available,
        paths=dict(sets.path_counts), states=dict(sets.state_counts), state_lambda=state_lambda,
        boundaries_tested=sets.boundaries_hit, boundaries=sets.boundaries,
        models_tested=set(sets.models_tested), models_target=set(models_target or ()),
        weights=weights,
    )


