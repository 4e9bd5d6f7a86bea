"""The analysis views of selected trials, printed: steps, trials, pass rates, fingerprints,
coverage, stability; and labelling traces. Each opens the lake, selects trials and writes
a view as a table, CSV or JSON.

Every error is a UsageError (exit 3) or DataError (exit 4) saying what to do: a lake that
cannot be read or a selection that matches nothing is the user's to fix, not a traceback.
"""

from __future__ import annotations

import contextlib

import duckdb
import pyarrow as pa

from ..lake.files import LakeError
from ..errors import DataError, UsageError
from ..report.output import write_table
from .coverage import coverage_report, coverage_sets
from .engine import Engine
from .fingerprint import fingerprint_matrix
from .labels import LabelError, read_labels_csv, unmatched_keys, write_labels
from .select import NoTrialsError, Selection, SelectorError, select_trials

STABILITY_SCORES = ("tool_usage_stability", "response_consistency", "redundancy", "cost_per_progress")

# the columns the terminal table shows (csv and json get every column)
_TABLE_COLUMNS = {
    "steps": ["trace_id", "seq", "depth", "step_kind", "agent_name", "tool_name", "model", "input_tokens",
              "output_tokens", "cost_usd", "status", "source_convention"],
    "trials": ["trace_id", "scenario", "version", "run_id", "outcome", "error_class", "n_steps", "n_llm",
               "n_tool", "input_tokens", "output_tokens", "cost_usd", "duration_ns"],
}


@contextlib.contextmanager
def _open(lake: str, selectors, prices):
    """An engine with the selected trials in temp table ``selected_trials``; errors become
    exit 3 (usage) or 4 (data)."""
    try:
        selection = Selection.parse(selectors)
    except SelectorError as e:
        raise UsageError(str(e)) from None
    try:
        eng = Engine(lake, prices=prices)
    except LakeError as e:
        raise DataError(str(e)) from None
    try:
        eng.materialize()
        select_trials(eng, selection)
        # aggregates (pass rates, stability across trials) over the selected trials only
        eng.restrict_trials("selected_trials")
        yield eng
    except NoTrialsError as e:
        raise DataError(str(e)) from None
    except duckdb.Error as e:
        raise DataError(f"reading the lake failed: {str(e).splitlines()[0]}") from None
    finally:
        eng.close()


def _show(table: pa.Table, fmt: str, view: str | None = None) -> None:
    if fmt == "table" and view in _TABLE_COLUMNS:
        table = table.select(_TABLE_COLUMNS[view])
    write_table(table, fmt)


def _view(eng, view: str, order: str) -> pa.Table:
    return eng.query(f"SELECT * FROM {view} SEMI JOIN selected_trials USING (trace_id) ORDER BY {order}")


def steps(lake, selectors, fmt, prices):
    """One row per agent step of the selected trials (the steps view); the table shows the main columns."""
    with _open(lake, selectors, prices) as eng:
        _show(_view(eng, "steps", "trace_id, seq"), fmt, "steps")


def trials(lake, selectors, fmt, prices):
    """One row per selected trial (the trials view)."""
    with _open(lake, selectors, prices) as eng:
        _show(_view(eng, "trials", "start_time_unix_nano, trace_id"), fmt, "trials")


def pass_rates(lake, selectors, fmt, prices):
    """Per-protocol and intent-to-treat pass rates per scenario and version of the selected trials."""
    with _open(lake, selectors, prices) as eng:
        # `trials` holds the selected trials only (_open), so the rates are theirs
        write_table(eng.query("SELECT * FROM pass_rates ORDER BY scenario, version"), fmt)


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


def fingerprint(lake, selectors, fmt, prices, tools):
    """The behavioural fingerprint of each selected trial, over ``tools`` (default: every tool they called)."""
    vocabulary = _names(tools, "--tools")
    with _open(lake, selectors, prices) as eng:
        write_table(fingerprint_matrix(eng, "selected_trials", vocabulary), fmt)


def coverage(lake, selectors, fmt, prices, tools, models, state_lambda, show_sets):
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
        write_table(pa.table({"set": [r[0] for r in rows], "item": [r[1] for r in rows],
                              "count": pa.array([r[2] for r in rows], pa.int64())}), fmt)
        return
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
    write_table(table, fmt)


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


def stability(lake, selectors, fmt, prices, floors, per_trial):
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
    write_table(table, fmt)


def label(lake, file) -> tuple[int, str, int]:
    """Write the labels of CSV ``file`` into the lake; return (keys labelled, the label file,
    keys that match no trace yet)."""
    try:
        table = read_labels_csv(file)
    except LabelError as e:
        raise UsageError(str(e)) from None
    try:
        # the lake is opened (and its files checked) before anything is written: a lake that
        # cannot be read gets no label file it could not use either
        missing = unmatched_keys(lake, table)
        path = write_labels(lake, table)
    except LakeError as e:
        raise DataError(str(e)) from None
    return table.num_rows, path, missing
