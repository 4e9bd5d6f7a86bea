"""The analysis views of selected trials as Arrow tables: steps, trials, pass rates,
fingerprints, coverage, stability; and labelling traces. Each opens the lake, selects
trials and returns a table; printing it (terminal table, CSV, JSON) is the caller's.

Every error is a UsageError (exit 3) or DataError (exit 4) saying what to do: a lake that
cannot be read or a selection that matches nothing is the user's to fix, not a traceback.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
import os

import duckdb
import pyarrow as pa

from ..lake.files import LakeError
from ..errors import DataError, UsageError
from .coverage import coverage_report, coverage_sets
from .engine import Engine, open_engine
from .fingerprint import fingerprint_matrix
from .labels import LabelError, read_labels_csv, write_labels
from .select import Selection, select_trials

STABILITY_SCORES = ("tool_usage_stability", "response_consistency", "redundancy", "cost_per_progress")

# the columns a terminal table shows of the wide views (csv and json get every column)
MAIN_COLUMNS = {
    "steps": ["trace_id", "seq", "depth", "step_kind", "agent_name", "tool_name", "model", "input_tokens",
              "output_tokens", "cost_usd", "status", "source_convention"],
    "trials": ["trace_id", "scenario", "version", "run_id", "outcome", "error_class", "n_steps", "n_llm",
               "n_tool", "input_tokens", "output_tokens", "cost_usd", "duration_ns"],
}


@contextlib.contextmanager
def _open(lake: str, selectors, prices):
    """An engine with the selected trials in temp table ``selected_trials``; errors become
    exit 3 (usage) or 4 (data)."""
    selection = Selection.parse(selectors)

    def prepare(eng):
        # only the traces the selection's version, scenario, run and outcome pick go through steps
        first = selection.before_steps()
        if first is not None:
            eng.scope([first])
        eng.materialize()
        select_trials(eng, selection)
        # aggregates (pass rates, stability across trials) over the selected trials only
        eng.restrict_trials("selected_trials")

    with _lake_errors():
        eng = open_engine(lake, prepare, prices=prices)
    try:
        with _lake_errors():
            yield eng
    finally:
        eng.close()


@contextlib.contextmanager
def _lake_errors():
    """A lake that cannot be read as a DataError (exit 4) saying what to do."""
    try:
        yield
    except LakeError as e:
        raise DataError(str(e)) from None
    except duckdb.IOException as e:
        raise DataError(f"reading the lake failed: {str(e).splitlines()[0]}; if the lake was compacted "
                        "meanwhile, run the command again") from None
    except duckdb.Error as e:
        raise DataError(f"reading the lake failed: {str(e).splitlines()[0]}") from None


def _view(eng, view: str, order: str) -> pa.Table:
    return eng.query(f"SELECT * FROM {view} SEMI JOIN selected_trials USING (trace_id) ORDER BY {order}")


def steps(lake, selectors, prices) -> pa.Table:
    """One row per agent step of the selected trials (the steps view)."""
    with _open(lake, selectors, prices) as eng:
        return _view(eng, "steps", "trace_id, seq")


def trials(lake, selectors, prices) -> pa.Table:
    """One row per selected trial (the trials view)."""
    with _open(lake, selectors, prices) as eng:
        return _view(eng, "trials", "start_time_unix_nano, trace_id")


def pass_rates(lake, selectors, prices) -> pa.Table:
    """Per-protocol and intent-to-treat pass rates per scenario and version of the selected trials."""
    with _open(lake, selectors, prices) as eng:
        # `trials` holds the selected trials only (_open), so the rates are theirs
        return eng.query("SELECT * FROM pass_rates ORDER BY scenario, version")


def _names(value: str | None, option: str) -> list[str] | None:
    """A comma-separated option's names; one that names nothing (``,,``) is a usage error
    rather than a silent "no tools"."""
    if value is None:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise UsageError(f"{option} {value!r} names nothing; give names separated by commas, "
                         "or leave the option out")
    return names


def fingerprint(lake, selectors, prices, tools) -> pa.Table:
    """The behavioural fingerprint of each selected trial, over ``tools`` (default: every tool they called)."""
    vocabulary = _names(tools, "--tools")
    with _open(lake, selectors, prices) as eng:
        return fingerprint_matrix(eng, "selected_trials", vocabulary)


def coverage(lake, selectors, prices, tools, models, state_lambda, show_sets) -> pa.Table:
    """Coverage of the selected trials per dimension and overall, or (``show_sets``) the sets
    it is computed from."""
    with _open(lake, selectors, prices) as eng:
        sets = coverage_sets(eng, "selected_trials")
    available = _names(tools, "--tools")
    target = _names(models, "--models")
    if show_sets:
        rows = ([("tool_used", k, v) for k, v in sorted(sets.tools_used.items())]
                + [("tool_available", k, None) for k in sorted(available or sets.tools_defined)]
                + [("path", k, v) for k, v in sets.path_counts.most_common()]
                + [("state", k, v) for k, v in sets.state_counts.most_common()]
                + [("boundary", "/".join(b), int(b in sets.boundaries_hit)) for b in sorted(sets.boundaries)]
                + [("model", k, v) for k, v in sorted(sets.models_tested.items())])
        return pa.table({"set": [r[0] for r in rows], "item": [r[1] for r in rows],
                         "count": pa.array([r[2] for r in rows], pa.int64())})
    try:
        report = coverage_report(sets, tools_available=available, models_target=target, state_lambda=state_lambda)
    except ValueError as e:
        raise UsageError(str(e)) from None
    dims = report.dimensions
    table = pa.table({
        "dimension": [d.name for d in dims] + ["overall"],
        "value": pa.array([d.value for d in dims] + [report.overall], pa.float64()),
        "observed": pa.array([d.observed for d in dims] + [None], pa.int64()),
        "denominator": pa.array([d.denominator for d in dims] + [None], pa.float64()),
        "sample_coverage": pa.array([d.sample_coverage for d in dims] + [None], pa.float64()),
        "note": [d.note or ("n/a" if d.value is None else "") for d in dims]
                + [f"{sets.n_trials} trials; n/a: {', '.join(report.undefined) or 'none'}"],
    })
    return table


def _parse_floors(floors) -> dict[str, float]:
    out = {name: 0.5 for name in STABILITY_SCORES}
    for f in floors:
        name, sep, value = f.partition("=")
        names = STABILITY_SCORES if not sep else (name.strip(),)
        try:
            v = float(value if sep else name)
        except ValueError:
            raise UsageError(f"--floor {f!r}: give a number or NAME=NUMBER") from None
        if not 0 <= v <= 1:  # sub-scores are in [0, 1]: a floor outside flags all or none
            raise UsageError(f"--floor {f!r}: a floor is between 0 and 1")
        for n in names:
            if n not in STABILITY_SCORES:
                raise UsageError(f"--floor {f!r}: unknown sub-score {n!r}; use one of {', '.join(STABILITY_SCORES)}")
            out[n] = v
    return out


def stability(lake, selectors, prices, floors, per_trial) -> pa.Table:
    """Stability sub-scores per scenario and version (or per trial), with the drift flags below ``floors``."""
    floor = _parse_floors(floors)
    with _open(lake, selectors, prices) as eng:
        scored = "{}" if per_trial else "mean_{}"
        flags = ", ".join(f"CASE WHEN {scored.format(n)} < ? THEN '{n}' END" for n in STABILITY_SCORES)
        # `trials` holds the selected trials only (_open): the summary aggregates those
        source = "SELECT * FROM stability" if per_trial else "SELECT * FROM stability_summary"
        table = eng.query(f"SELECT * REPLACE (list_filter([{flags}], lambda x: x IS NOT NULL) AS drift_flags) "
                          f"FROM ({source}) ORDER BY scenario, version{', trace_id' if per_trial else ''}",
                          [floor[n] for n in STABILITY_SCORES])
    return table


@dataclass(frozen=True)
class LabelMatches:
    """What the keys of a labels file match in the lake, for `otel-assay label` to report."""

    keys: int            # keys labelled
    traces: int          # traces the keys match, each counted once
    unmatched: int       # keys no span carries (yet: later traces of a session pick the label up)
    shared: int          # keys that match several traces
    shared_traces: int   # the traces those keys match
    most: int            # the most traces one key matches


def label(lake, file) -> tuple[int, str, LabelMatches]:
    """Write the labels of CSV ``file`` into the lake; return (keys labelled, the label file,
    what the keys match)."""
    try:
        table = read_labels_csv(file)
    except LabelError as e:
        raise UsageError(str(e)) from None
    try:
        # the lake is opened (and its files checked) before anything is written: a lake that
        # cannot be read gets no label file it could not use either
        matches = key_matches(lake, table)
        path = write_labels(lake, table)
    except LakeError as e:
        raise DataError(str(e)) from None
    return table.num_rows, path, matches


def key_matches(lake_dir: str | os.PathLike, labels: pa.Table) -> LabelMatches:
    """How the keys of ``labels`` match the lake's traces.

    A trial is one trace, and a conversation or session key labels every trace that carries
    it: a key that matches several traces (one run recorded as several traces, by
    instrumentations whose context does not reach each other) makes as many trials, each
    with the key's labels. Counted here so that `label` can say so rather than leave the
    user to find more trials than runs.
    """
    engine = Engine(lake_dir)
    try:
        engine.con.register("_new_labels", labels)
        row = engine.rows("""
            WITH hits AS (
                -- trace ids by equality (a hash join), the attribute keys by the view's own rule
                SELECT DISTINCT l.key_kind, l.key, s.trace_id FROM _new_labels l
                JOIN spans s ON l.key_kind = 'trace_id' AND s.trace_id = l.key
                UNION
                SELECT DISTINCT l.key_kind, l.key, s.trace_id FROM _new_labels l
                JOIN spans s ON l.key_kind <> 'trace_id' AND label_key_matches(l.key_kind, l.key, s.attributes)
            ),
            per_key AS (
                SELECT l.key_kind, l.key, count(h.trace_id) AS n
                FROM _new_labels l LEFT JOIN hits h USING (key_kind, key)
                GROUP BY l.key_kind, l.key
            )
            SELECT count(*), (SELECT count(DISTINCT trace_id) FROM hits), count(*) FILTER (WHERE n = 0),
                   count(*) FILTER (WHERE n > 1), coalesce(sum(n) FILTER (WHERE n > 1), 0), coalesce(max(n), 0)
            FROM per_key""")[0]
    finally:
        engine.con.close()
    return LabelMatches(*map(int, row))
