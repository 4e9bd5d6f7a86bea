"""The lakes the gate reads: opening them within a memory budget, and selecting each arm's trials.

Every way a lake or a selection can be wrong (empty, no trials, no match, overlapping
arms) is a UsageError or DataError here, with what to do, before any statistics run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import duckdb

from ..errors import DataError, UsageError, interrupted
from ..analyze.engine import open_engine
from ..analyze.select import NoTrialsError, Selection, SelectorError, select_trials
from .. import settings
from ..lake.files import LakeError


def engines(eng_b, eng_c) -> list:
    """The engines of baseline and candidate, once each (both are one engine on one lake)."""
    return [eng_b] if eng_b is eng_c else [eng_b, eng_c]


def open_lake(lake, selectors: Sequence[str | None] = ()) -> Any:
    """An engine on ``lake`` with `steps` and `trials` computed.

    ``selectors``: every selection the gate will make on this lake, when all are known
    before it opens. The engine then reads only the traces that their versions, scenarios,
    runs and outcomes pick (Engine.scope): on a lake of many versions a gate of two costs
    about what it costs on a lake of those two. What the gate reads of a lake is each
    arm's trials, each computed from its own spans, so its result is the same."""
    if not isinstance(lake, (str, os.PathLike)):
        return lake
    predicates = _scope_predicates(selectors)
    # DuckDB's default is 80 % of RAM; the gate must stay within a CI runner's budget
    # (2 GB at 2,000,000 spans: 1.3 GB peak with this limit, bench/bench_gate.py), and
    # DuckDB spills to disk past the limit.
    limit = settings.memory_limit("1.5GB")
    try:
        # the views every gate reads many times, computed while a compaction that replaced
        # files listed at open can still be healed by opening again (open_engine)
        eng = open_engine(lake, lambda e: _prepare(e, predicates), memory_limit=limit)
    except LakeError as e:
        raise DataError(f"{lake}: {e}") from None
    except duckdb.Error:
        # reading the rows failed (a corrupt data page, too little memory): the command line
        # reports it with what to do about it (find the corrupt file, OTEL_ASSAY_MEMORY_LIMIT)
        raise
    except Exception as e:
        if interrupted(e):
            raise
        raise DataError(f"{lake}: cannot read the lake: {str(e).splitlines()[0]}") from None
    return eng


def _scope_predicates(selectors: Sequence[str | None]) -> list[tuple[str, list[str]]] | None:
    """What Engine.scope narrows the lake to for ``selectors``, or None to read all of it:
    when a selection is left to a default (all trials, the lake's two versions), cannot be
    parsed (the error is reported where it always was, after the lake's own checks), or
    picks no version, scenario, run or outcome."""
    if not selectors or not all(selectors):
        return None
    predicates = []
    for selector in selectors:
        try:
            first = Selection.parse([selector]).before_steps()
        except SelectorError:
            return None
        if first is None:
            return None
        predicates.append(first)
    return predicates


def _prepare(eng, predicates: list[tuple[str, list[str]]] | None) -> None:
    if predicates:
        # every arm must keep a trial with a scenario: otherwise the lake's checks (no
        # trials, nothing matches) speak about the whole lake, which is then read
        eng.scope(predicates, each="scenario IS NOT NULL")
    eng.materialize(["steps", "trials"])


def check_has_trials(eng, lake_name: str) -> None:
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


def select(eng, selector: str | None, table: str, lake_name: str) -> int:
    sel = Selection.parse([selector] if selector else [])
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


def default_selectors(eng, baseline, candidate, separate_baseline: bool,
                       lake_name: str) -> tuple[str | None, str | None]:
    """With no selectors: the two versions of the lake, oldest first, are baseline and candidate."""
    if separate_baseline or (baseline and candidate):
        return baseline, candidate
    for given in (baseline, candidate):
        if given:  # a wrong key or shape in the one given is the thing to say
            Selection.parse([given])
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
        select(eng, given, "_given_trials", lake_name)
    raise UsageError(f"say which trials to compare with --baseline SEL and --candidate SEL (for example "
                     f"--baseline version=v1 --candidate version=v2); the lake's versions: {listing}")


def lake_name(lake) -> str:
    return str(lake) if isinstance(lake, (str, os.PathLike)) else "lake"


def same_path(a, b) -> bool:
    if not isinstance(a, (str, os.PathLike)) or not isinstance(b, (str, os.PathLike)):
        return a is b
    try:
        return os.path.samefile(a, b)
    except OSError:  # a glob, or a path that does not exist (opening it reports that)
        return Path(a).resolve() == Path(b).resolve()
