"""Contracts and metamorphic relations judged on the recorded trials of a lake, from a YAML
config: the rows the ``contracts`` and ``metamorphic`` commands print, and their exit code.

No agent runs and no tokens are spent: every verdict comes from spans already recorded.
"""

from __future__ import annotations

from typing import Any

import yaml

from .. import yamlfile
from ..analyze.engine import open_engine
from ..analyze.select import Selection, select_trials
from ..lake.files import LakeError
from ..errors import EXIT_BLOCK, EXIT_DEPLOY, EXIT_MANUAL, DataError, UsageError
from .contracts import check_names, evaluate, parse_contracts, verdicts
from .metamorphic import evaluate as evaluate_relations, parse_relations
from .metamorphic import verdicts as relation_verdicts


def _load_yaml(path: str, key: str):
    try:
        with open(path, encoding="utf-8") as f:
            doc = yamlfile.load(f.read(), path)
    except OSError as e:
        raise UsageError(f"cannot read config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UsageError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    if not isinstance(doc, dict) or key not in doc:
        raise UsageError(f"{path}: no `{key}:` list (see `otel-assay {key} --help`)")
    return doc[key]


def load_contracts(path: str):
    """The ``contracts:`` list of a YAML config file, parsed; UsageError naming what is wrong."""
    return parse_contracts(_load_yaml(path, "contracts"), where=f"{path}: contracts")


def load_relations(path: str):
    """The ``metamorphic:`` list of a YAML config file, parsed."""
    return parse_relations(_load_yaml(path, "metamorphic"), where=f"{path}: metamorphic")


def _open_selected(lake: str, selectors, table: str):
    """An engine over LAKE with the selected trials' rows in temp table ``table``."""
    selection = Selection.parse(selectors)
    try:
        # selecting reads the lake: a file compacted away meanwhile is healed by opening again
        eng = open_engine(lake, lambda e: select_trials(e, selection))
    except LakeError as e:
        raise DataError(str(e)) from None
    eng.rows(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM trials SEMI JOIN selected_trials USING (trace_id)")
    return eng


def exit_code(rows: list[dict[str, Any]]) -> int:
    """0 when every verdict is PASS, 1 when any is FAIL, 2 otherwise. No verdict at all
    (every contract scoped to scenarios not selected) supports no deploy: 2."""
    found = {r["verdict"] for r in rows}
    return EXIT_BLOCK if "FAIL" in found else EXIT_MANUAL if found - {"PASS"} or not found else EXIT_DEPLOY


def contract_rows(lake: str, config_path: str, selectors) -> list[dict[str, Any]]:
    """Per contract, scenario and version of the selected trials: trials judged, the share
    where it holds with its Wilson interval, and the verdict against its threshold."""
    specs = load_contracts(config_path)
    if not specs:
        # the starter config from `otel-assay init` has `contracts: []`: say what goes there
        raise UsageError(f"{config_path}: the contracts list is empty; add contracts such as "
                         f"`contracts: [{{max_steps: 12}}, {{must_call: [lookup_order]}}]` "
                         f"(every kind: otel-assay contracts --help)")
    eng = _open_selected(lake, selectors, "contract_trials")
    try:
        check_names(eng, specs)
        results = evaluate(eng, specs, trials="contract_trials")
    finally:
        eng.close()
    return [{
        "contract": v.contract, "kind": v.kind, "scenario": v.scenario, "version": v.version,
        "trials": v.n, "holds": v.holds, "unjudged": v.unknown,
        "rate": None if v.rate is None else round(v.rate, 4),
        "ci_low": None if v.ci is None else round(v.ci[0], 4),
        "ci_high": None if v.ci is None else round(v.ci[1], 4),
        "threshold": v.threshold, "verdict": v.verdict,
    } for v in verdicts(results)]


def relation_rows(lake: str, config_path: str, selectors) -> list[dict[str, Any]]:
    """Per relation and version of the selected follow-up trials: pairs judged, the share
    where it is violated with its interval, and the verdict against its threshold."""
    relations = load_relations(config_path)
    if not relations:
        raise UsageError(f"{config_path}: the metamorphic list is empty; add relations such as "
                         f"`metamorphic: [{{relation: doc-order, compare: same_final_answer}}]` naming the "
                         f"relation your follow-up trials carry (otel-assay metamorphic --help)")
    eng = _open_selected(lake, selectors, "relation_trials")
    try:
        pairs = evaluate_relations(eng, relations, trials="relation_trials")
    finally:
        eng.close()
    return [{
        "relation": v.relation, "family": v.family, "compare": v.compare, "version": v.version,
        "pairs": v.pairs, "holds": v.holds, "unjudged": v.unjudged,
        "violation_rate": None if v.violation_rate is None else round(v.violation_rate, 4),
        "ci_low": None if v.ci is None else round(v.ci[0], 4), "ci_high": None if v.ci is None else round(v.ci[1], 4),
        "threshold": v.threshold, "verdict": v.verdict,
    } for v in relation_verdicts(relations, pairs)]
