"""Selected trials read alone (Engine.scope) give the rows the whole lake gives for them.

The analysis commands resolve a selection's version, scenario, run and outcome on the
trials' spans and labels first, and compute `steps` only for the traces selected. The
reference here is the simple path: every trial of the lake computed, then selected.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from otel_assay.analyze import tables
from otel_assay.analyze.engine import Engine
from otel_assay.analyze.labels import read_labels_csv, write_labels
from otel_assay.analyze.select import NoTrialsError, Selection, select_trials

from .lakes import span, tid, write_lake

VERSIONS = ["v1", "v2", "v3"]
SCENARIOS = ["refund", "lookup"]
MODELS = ["m-a", "m-b"]


def _trial_spans(t: dict) -> tuple[list[dict], list[dict]]:
    """(the root's file, the other spans' file) of one trial spec (see _write)."""
    n = t["n"]
    base = n * 100
    attrs = {}
    resource = {"service.name": "agent"}
    if t["marked"]:
        attrs["assay.scenario"] = t["scenario"]
        attrs["assay.run.id"] = f"run-{t['version']}"
        if t["version_via"] == "attribute":
            attrs["assay.agent.version"] = t["version"]
        elif t["version_via"] == "integer":  # another type than the typed column's: kept in the map
            attrs["assay.agent.version"] = int(t["version"][1:])
        else:
            resource["service.version"] = t["version"]
    root_attrs = dict(attrs)
    if t["outcome"] is not None:
        root_attrs["assay.trial.outcome"] = t["outcome"]
    root = span(n, base + 1, None, f"assay.trial {t['scenario']}", n * 10, n * 10 + 9, root_attrs,
                resource=resource)
    children = [span(n, base + 2, base + 1, f"chat {t['model']}", n * 10 + 1, n * 10 + 2,
                     {**attrs, "gen_ai.operation.name": "chat", "gen_ai.request.model": t["model"],
                      "gen_ai.usage.input_tokens": 10 + n, "gen_ai.usage.output_tokens": 5,
                      "gen_ai.conversation.id": f"conv-{n}"}, resource=resource)]
    for k in range(t["tools"]):
        children.append(span(n, base + 3 + k, base + 1, "execute_tool lookup", n * 10 + 3 + k, n * 10 + 3.5 + k,
                             {**attrs, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"t{k}"},
                             resource=resource))
    return [root], children


def _write(lake: Path, trials: list[dict], tmp: Path) -> Path:
    """Each trial's spans into file ``file``, its children into file ``file + 1`` when
    ``split`` (a trial across files); ``label``: labelled by trace id or by conversation."""
    files: dict[int, list[dict]] = {}
    for t in trials:
        root, children = _trial_spans(t)
        files.setdefault(t["file"], []).extend(root)
        files.setdefault(t["file"] + (1 if t["split"] else 0), []).extend(children)
    for k in sorted(files):
        write_lake(lake, files[k])
    by_trace = [t for t in trials if t["label"] == "trace"]
    if by_trace:
        csv = tmp / "by-trace.csv"
        csv.write_text("trace_id,scenario,version,outcome\n" + "".join(
            f"{tid(t['n'])},{t['label_scenario']},{t['label_version']},pass\n" for t in by_trace))
        write_labels(lake, read_labels_csv(csv))
    by_conversation = [t for t in trials if t["label"] == "conversation"]
    if by_conversation:
        csv = tmp / "by-conversation.csv"
        csv.write_text("gen_ai.conversation.id,version,outcome\n" + "".join(
            f"conv-{t['n']},{t['label_version']},fail\n" for t in by_conversation))
        write_labels(lake, read_labels_csv(csv))
    return lake


def _reference(lake, selectors, view: str, order: str):
    """The simple path: every trial of the lake computed, then the selected ones read."""
    eng = Engine(lake)
    try:
        eng.materialize()
        select_trials(eng, Selection.parse(selectors))
        eng.restrict_trials("selected_trials")
        return eng.query(f"SELECT * FROM {view} SEMI JOIN selected_trials USING (trace_id) ORDER BY {order}")
    finally:
        eng.close()


COMMANDS = {
    "trials": (tables.trials, "trials", "start_time_unix_nano, trace_id"),
    "steps": (tables.steps, "steps", "trace_id, seq"),
}


def _outcome(fn):
    try:
        return fn()
    except NoTrialsError as e:
        return f"NoTrialsError: {e}"


def _same(lake, selectors) -> list[int]:
    """Assert every command gives the reference's rows; return their row counts."""
    counts = []
    for command, (fn, view, order) in COMMANDS.items():
        got = _outcome(lambda: fn(lake, selectors, None))
        want = _outcome(lambda: _reference(lake, selectors, view, order))
        if isinstance(want, str):
            assert got == want, (command, selectors)
            counts.append(0)
            continue
        assert not isinstance(got, str), (command, selectors, got)
        assert got.num_rows == want.num_rows, (command, selectors)
        assert got.schema == want.schema
        assert got.to_pylist() == want.to_pylist(), (command, selectors)
        counts.append(got.num_rows)
    return counts


def _spec(n, version, scenario="refund", *, marked=True, version_via="attribute", outcome="pass", model="m-a",
          tools=1, file=0, split=False, label=None, label_version=None, label_scenario=None):
    return dict(n=n, version=version, scenario=scenario, marked=marked, version_via=version_via, outcome=outcome,
                model=model, tools=tools, file=file, split=split, label=label, label_version=label_version,
                label_scenario=label_scenario)


@pytest.fixture
def lake(tmp_path):
    """Three versions over two scenarios, written by three runs (files), with: a trial across
    two files, versions from the resource and as integers, boolean outcomes, traces with no
    assay.* attributes (one labelled by trace id, one by conversation, one not at all)."""
    trials = []
    n = 1
    for f, v in enumerate(VERSIONS):
        for k in range(6):
            trials.append(_spec(n, v, SCENARIOS[k % 2], outcome=["pass", "fail", True][k % 3], model=MODELS[k % 2],
                                tools=k % 3, file=2 * f, version_via=["attribute", "resource", "integer"][k % 3]))
            n += 1
    trials.append(_spec(n, "v2", file=2, split=True))  # root in the v2 run's file, the rest in the next one
    trials.append(_spec(n + 1, None, None, marked=False, label="trace", label_version="v2", label_scenario="lookup"))
    trials.append(_spec(n + 2, None, None, marked=False, label="conversation", label_version="v1"))
    trials.append(_spec(n + 3, None, None, marked=False, file=4))
    return _write(tmp_path / "lake", trials, tmp_path)


def test_selected_versions_give_the_rows_of_the_whole_lake(lake):
    """version=v2 reads about a third of the lake's spans, and its rows are those of the
    whole lake's: the split trial, the labelled one and the ones versioned by resource or
    integer are among them."""
    eng = Engine(lake)
    try:
        total = eng.rows("SELECT count(*) FROM spans")[0][0]
        assert eng.scope([Selection.parse(["version=v2"]).before_steps()])
        scoped = eng.rows("SELECT count(*) FROM spans")[0][0]
        versions = dict(eng.rows("SELECT version, count(*) FROM trials GROUP BY 1"))
    finally:
        eng.close()
    assert 0 < scoped < total / 2
    # v2 by attribute or resource (4), the split trial, the trial labelled v2; the integer
    # versions read "2"
    assert versions == {"v2": 6}
    n_trials, n_steps = _same(lake, ["version=v2"])
    assert n_trials == 6 and n_steps > n_trials


@pytest.mark.parametrize("selectors", [
    ["version=v1"], ["version=v3", "scenario=lookup"], ["version=v1,scenario=refund"], ["run=run-v3"],
    ["outcome=pass"], ["outcome=fail,version=v1"], ["version="], ["scenario="], ["version=v2", "model=m-b"],
    ["model=m-a"], ["version=v2", "model=m-z"], ["version=v9"], ["version=v1", "outcome="],
])
def test_every_selection_gives_the_rows_of_the_whole_lake(lake, selectors):
    _same(lake, selectors)


def test_a_selection_matching_nothing_names_what_the_whole_lake_has(lake):
    """A model no selected trial used: the trials of v2 are read alone, and the message
    still counts the whole lake's trials and models."""
    with pytest.raises(NoTrialsError) as e:
        tables.trials(lake, ["version=v2", "model=m-z"], None)
    assert "the lake has 22 trials" in str(e.value)
    assert "model: m-a (" in str(e.value) and "m-b (" in str(e.value)


def test_the_aggregates_and_fingerprints_of_a_scoped_selection(lake):
    """pass rates, stability and fingerprints aggregate the selected trials only, scoped or not."""
    sel = ["version=v1"]
    eng = Engine(lake)
    try:
        eng.materialize()
        select_trials(eng, Selection.parse(sel))
        eng.restrict_trials("selected_trials")
        rates = eng.query("SELECT * FROM pass_rates ORDER BY scenario, version")
        summary = eng.query("SELECT * FROM stability_summary ORDER BY scenario, version")
    finally:
        eng.close()
    got_rates = tables.pass_rates(lake, sel, None)
    assert got_rates.num_rows == rates.num_rows == 3  # refund, lookup, and the labelled trial without one
    assert got_rates.to_pylist() == rates.to_pylist()
    got = tables.stability(lake, sel, None, [], False)
    assert got.num_rows == summary.num_rows == 3
    assert got.drop_columns(["drift_flags"]).to_pylist() == summary.drop_columns(["drift_flags"]).to_pylist()
    fp = tables.fingerprint(lake, sel, None, None)
    assert fp.num_rows == 5 and set(fp.column("version").to_pylist()) == {"v1"}


def test_a_scope_over_files_with_stored_steps(lake):
    """Step files (written by compact) are read for the scoped traces only."""
    from otel_assay.analyze.stepwrite import write_step_files

    write_step_files(lake)
    eng = Engine(lake)
    try:
        assert eng.step_files
    finally:
        eng.close()
    assert _same(lake, ["version=v3"])[1] > 0
    assert _same(lake, ["version=v2"])[0] == 6


# ------------------------------------------------------------------ differential fuzzing

_trial = st.fixed_dictionaries({
    "version": st.sampled_from(VERSIONS), "scenario": st.sampled_from(SCENARIOS),
    "marked": st.booleans(), "version_via": st.sampled_from(["attribute", "resource", "integer"]),
    "outcome": st.sampled_from(["pass", "fail", True, False, None]), "model": st.sampled_from(MODELS),
    "tools": st.integers(0, 2), "file": st.integers(0, 3), "split": st.booleans(),
    "label": st.sampled_from([None, None, "trace", "conversation"]),
    "label_version": st.sampled_from(VERSIONS), "label_scenario": st.sampled_from(SCENARIOS),
})
_pair = st.one_of(
    st.builds(lambda v: f"version={v}", st.sampled_from(VERSIONS + ["", "v9"])),
    st.builds(lambda v: f"scenario={v}", st.sampled_from(SCENARIOS + [""])),
    st.builds(lambda v: f"run=run-{v}", st.sampled_from(VERSIONS)),
    st.builds(lambda v: f"outcome={v}", st.sampled_from(["pass", "fail", ""])),
    st.builds(lambda v: f"model={v}", st.sampled_from(MODELS + ["m-z"])),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trials=st.lists(_trial, min_size=1, max_size=8), selectors=st.lists(_pair, min_size=1, max_size=2))
def test_scoped_and_whole_lake_rows_agree(tmp_path_factory, trials, selectors):
    tmp = tmp_path_factory.mktemp("fuzz")
    lake = _write(tmp / "lake", [dict(t, n=i + 1) for i, t in enumerate(trials)], tmp)
    _same(lake, selectors)
