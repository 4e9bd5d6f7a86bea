"""Metamorphic relations checked offline on recorded pairs of trials: an agent's answer has
no fixed expected value, but how it should change (or not) when the input changes in a
known way can be checked — the AgentAssay paper's way round the oracle problem.

A follow-up trial carries ``assay.mr.relation``, ``assay.mr.source`` (the source trial's
trace id) and ``assay.mr.transform`` on its root span (see :mod:`otel_assay.metamorphic`).
For each configured relation, every recorded (source, follow-up) pair is compared; the share
of pairs where the relation holds gets a Wilson interval and a verdict against the
relation's threshold, and two versions are compared with the regression verdict on those
shares (a candidate that breaks a relation more often regressed).

Comparisons:

- ``same_final_answer``: the final outputs are equal after normalisation (case, punctuation
  and whitespace ignored) — permutation relations such as document-order invariance;
- ``same_tool_set``: the same set of tools was called — tool-order invariance, noise robustness;
- ``same_verdict``: the trials' outcomes agree — idempotence, agent substitutability;
- ``output_length_within``: the follow-up's final output length is within ``tolerance``
  (a ratio) of the source's — format compliance, constraint preservation.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .. import semconv
from ..errors import DataError
from .contracts import ContractError, tally

FAMILIES = ("permutation", "perturbation", "composition", "oracle")
COMPARISONS = ("same_final_answer", "same_tool_set", "same_verdict", "output_length_within")


class RelationDataError(DataError, LookupError):
    """The lake lacks what a relation needs (pairs, or the source trials they name): exit 4."""


@dataclass(frozen=True)
class Relation:
    name: str
    family: str
    compare: str
    tolerance: float = 0.2
    threshold: float = 0.9
    alpha: float = 0.05


def parse_relations(spec: Any, *, where: str = "metamorphic") -> list[Relation]:
    if spec is None:
        return []
    if not isinstance(spec, list):
        raise ContractError(f"{where}: expected a list of relations")
    out, names = [], set()
    allowed = {"relation", "family", "compare", "tolerance", "threshold", "alpha"}
    for i, item in enumerate(spec, 1):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ContractError(f"{at}: expected a mapping like {{relation: doc-order, compare: same_final_answer}}")
        unknown = sorted(set(item) - allowed)
        if unknown:
            raise ContractError(f"{at}: unknown key {unknown[0]!r}; keys: {', '.join(sorted(allowed))}")
        name = item.get("relation")
        if not isinstance(name, str) or not name:
            raise ContractError(f"{at}: `relation:` (the name follow-up trials carry in assay.mr.relation) is required")
        if name in names:
            raise ContractError(f"{at}: relation {name!r} is configured twice")
        names.add(name)
        family = item.get("family", "permutation")
        if family not in FAMILIES:
            raise ContractError(f"{at}: family {family!r} is not one of {', '.join(FAMILIES)}")
        compare = item.get("compare")
        if compare not in COMPARISONS:
            raise ContractError(f"{at}: compare must be one of {', '.join(COMPARISONS)}, got {compare!r}")
        tolerance = item.get("tolerance", 0.2)
        ok = isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool)
        try:  # NaN would compare false with every length difference: every pair a violation
            ok = ok and 0 <= float(tolerance) < math.inf
        except OverflowError:
            ok = False
        if not ok:
            raise ContractError(f"{at}: tolerance must be a finite non-negative number, got {tolerance!r}")
        threshold, alpha = item.get("threshold", 0.9), item.get("alpha", 0.05)
        for opt, v in (("threshold", threshold), ("alpha", alpha)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
                raise ContractError(f"{at}: {opt} must be a number strictly between 0 and 1, got {v!r}")
        out.append(Relation(name, family, compare, float(tolerance), float(threshold), float(alpha)))
    return out


_PAIRS = f"""
WITH follow AS (
    SELECT trace_id,
           attributes['{semconv.ASSAY_MR_RELATION}'] AS relation,
           lower(attributes['{semconv.ASSAY_MR_SOURCE}']) AS source,
           attributes['{semconv.ASSAY_MR_TRANSFORM}'] AS transform
    FROM spans
    WHERE parent_span_id IS NULL AND list_contains(?::VARCHAR[], attributes['{semconv.ASSAY_MR_RELATION}'])
    -- one pair per follow-up trial: a retransmitted root span (stored twice; the steps and
    -- trials views keep it once) would count the pair twice and narrow the interval
    QUALIFY row_number() OVER (PARTITION BY trace_id, relation ORDER BY start_time_unix_nano, span_id) = 1
),
tool_sets AS (
    SELECT trace_id, list(DISTINCT tool_name ORDER BY tool_name) AS tools
    FROM steps WHERE step_kind = 'tool' AND tool_name IS NOT NULL GROUP BY trace_id
),
final AS (
    SELECT trace_id, arg_max(output_text, seq) AS output FROM steps WHERE step_kind = 'respond' GROUP BY trace_id
)
SELECT f.relation, f.transform, f.trace_id AS follow_up, f.source, ft.scenario, ft.version,
       st.trace_id IS NOT NULL AS source_found, st.version AS source_version,
       sf.output AS source_output, ff.output AS follow_output,
       coalesce(ss.tools, []::VARCHAR[]) AS source_tools, coalesce(fs.tools, []::VARCHAR[]) AS follow_tools,
       st.outcome AS source_outcome, ft.outcome AS follow_outcome,
       coalesce(st.counted AND ft.counted, false) AS counted
FROM follow f
JOIN {{trials}} ft ON ft.trace_id = f.trace_id
LEFT JOIN trials st ON st.trace_id = f.source
LEFT JOIN final sf ON sf.trace_id = f.source
LEFT JOIN final ff ON ff.trace_id = f.trace_id
LEFT JOIN tool_sets ss ON ss.trace_id = f.source
LEFT JOIN tool_sets fs ON fs.trace_id = f.trace_id
-- in the order the follow-up trials ran: the gate reads each relation's pairs as a sequence
ORDER BY f.relation, ft.version, ft.trial_index NULLS LAST, ft.start_time_unix_nano, f.trace_id
"""


def normalise_answer(text: str | None) -> str | None:
    if text is None:
        return None
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


def holds(rel: Relation, pair: Mapping[str, Any]) -> bool | None:
    """Whether ``rel`` holds for one recorded pair; None when the pair lacks what it compares."""
    if rel.compare == "same_final_answer":
        a, b = normalise_answer(pair["source_output"]), normalise_answer(pair["follow_output"])
        return None if a is None or b is None else a == b
    if rel.compare == "same_tool_set":
        return set(pair["source_tools"]) == set(pair["follow_tools"])
    if rel.compare == "same_verdict":
        a, b = pair["source_outcome"], pair["follow_outcome"]
        return None if a is None or b is None else a == b
    a, b = pair["source_output"], pair["follow_output"]
    if a is None or b is None:
        return None
    return abs(len(b) - len(a)) <= rel.tolerance * max(len(a), 1)


@dataclass(frozen=True)
class RelationVerdict:
    relation: str
    family: str
    compare: str
    version: str | None
    pairs: int
    holds: int
    unjudged: int
    violation_rate: float | None
    ci: tuple[float, float] | None   # interval of the share of pairs where the relation holds
    threshold: float
    verdict: str


def evaluate(engine, relations: list[Relation], *, trials: str = "trials") -> list[dict]:
    """One dict per recorded pair: the pair's columns plus ``holds`` (True/False/None).

    Raises :class:`RelationDataError` when a configured relation has no pairs, or when
    follow-up trials name source trials that are not in the lake.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", trials):
        raise ValueError(f"not a table name: {trials!r}")
    by_name = {r.name: r for r in relations}
    cur = engine.con.execute(_PAIRS.format(trials=trials), [list(by_name)])
    names = [d[0] for d in cur.description]
    pairs = [dict(zip(names, row)) for row in cur.fetchall()]
    for rel in relations:
        mine = [p for p in pairs if p["relation"] == rel.name]
        if not mine:
            raise RelationDataError(f"relation {rel.name!r}: no follow-up trials in the lake carry "
                                    f"{semconv.ASSAY_MR_RELATION}={rel.name!r}; run them with "
                                    "otel_assay.metamorphic.follow_up(...) attributes")
        missing = [p["source"] for p in mine if not p["source_found"]]
        if missing:
            example = missing[0] or f"none: a follow-up without {semconv.ASSAY_MR_SOURCE}"
            raise RelationDataError(f"relation {rel.name!r}: {len(missing)} of {len(mine)} follow-up trials name "
                                    f"source trials that are not in the lake (for example {example}); "
                                    "import the source trials or select a lake that has both")
        # a relation is about one version's answers to an input and its transform; a source of
        # another version would judge the difference between the versions as a violation
        crossed = [p for p in mine if p["source_version"] != p["version"]]
        if crossed:
            p = crossed[0]
            raise RelationDataError(f"relation {rel.name!r}: {len(crossed)} of {len(mine)} follow-up trials name "
                                    f"source trials of another version (for example follow-up {p['follow_up']} "
                                    f"of version {p['version']!r}, source {p['source']} of version "
                                    f"{p['source_version']!r}); record each follow-up with its source's version")
    for p in pairs:
        # a pair with a trial that does not count (an infrastructure error, an empty run: no
        # tools, no answer, outcome fail) measured nothing about the agent: not judged, rather
        # than a violation of same_tool_set or same_verdict
        p["holds"] = holds(by_name[p["relation"]], p) if p["counted"] else None
    return pairs


def verdicts(relations: list[Relation], pairs: list[dict]) -> list[RelationVerdict]:
    # imported here: the gate loads this module to read a config (`gate init`, `run --config`),
    # which must not pay the scipy (0.9 s) that the statistics bring
    from ..stats import verdict as pass_rate_verdict

    out = []
    for rel in relations:
        versions = tally((p["version"], p["holds"]) for p in pairs if p["relation"] == rel.name)
        for version, (n, k, unjudged) in sorted(versions.items(), key=lambda kv: str(kv[0])):
            if n == 0:
                out.append(RelationVerdict(rel.name, rel.family, rel.compare, version, 0, 0, unjudged, None, None,
                                           rel.threshold, "INCONCLUSIVE"))
                continue
            r = pass_rate_verdict(k, n, rel.threshold, rel.alpha)
            out.append(RelationVerdict(rel.name, rel.family, rel.compare, version, n, k, unjudged, 1 - k / n,
                                       (r.ci.low, r.ci.high), rel.threshold, r.verdict.value))
    return out

