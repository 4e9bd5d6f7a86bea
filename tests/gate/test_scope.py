"""A gate over two versions of a lake of many reads only their trials, and says the same.

The gate knows its selections before it opens the lake, so the engine computes `steps`
for the selected trials alone (Engine.scope). The reference is the simple path: the gate
on an engine that reads the whole lake (an Engine given as the lake is used as it is).
"""

from __future__ import annotations

import math

import pytest

from otel_assay.analyze.engine import Engine
from otel_assay.analyze.labels import read_labels_csv, write_labels
from otel_assay.gate import GateConfig, run_gate
from otel_assay.gate.lakes import open_lake
from otel_assay.report.json_report import report_dict

from .lakes import write_trials

VERSIONS = ["v1", "v2", "v3", "v4"]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """Four versions over two scenarios, each version written by its own run; traces with
    no assay.* attributes, one of them labelled into v3 by a label file."""
    root = tmp_path_factory.mktemp("scope")
    lake = root / "lake"
    for k, v in enumerate(VERSIONS):
        tools = [["lookup"], ["lookup", "refund"], ["search"], ["lookup", "search"]][k]
        write_trials(lake, [{"scenario": f"s{i % 2}", "version": v, "outcome": "pass" if (i + k) % 4 else "fail",
                             "tools": tools if i % 3 else tools[:1], "index": i} for i in range(12)], seed=k)
    write_trials(lake, [{"scenario": None, "version": None, "tools": ["lookup"]} for _ in range(3)], seed=9)
    eng = Engine(lake)
    try:
        unmarked = [r[0] for r in eng.rows("SELECT trace_id FROM trials WHERE scenario IS NULL ORDER BY 1")]
    finally:
        eng.close()
    assert len(unmarked) == 3
    csv = root / "labels.csv"
    csv.write_text(f"trace_id,scenario,version,outcome\n{unmarked[0]},s1,v3,pass\n")
    write_labels(lake, read_labels_csv(csv))
    return lake


def _report(result) -> dict:
    out = report_dict(result)
    del out["created_at"]
    for side in ("baseline", "candidate"):
        if out[side]:
            del out[side]["lake"]
    return out


def _assert_same(got, want, path="report"):
    """Equal, floats to the last digits a parallel sum may move (DuckDB adds in any order)."""
    if isinstance(want, float) and isinstance(got, float):
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), path
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), path
        for k in want:
            _assert_same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{path}[{i}]")
    else:
        assert got == want, path


def _whole_lake(lake, **kw):
    eng = Engine(lake, memory_limit="1.5GB")
    try:
        return run_gate(eng, **kw)
    finally:
        eng.close()


def test_the_gate_reads_only_the_selected_versions(lake):
    eng = open_lake(lake, ["version=v2", "version=v3"])
    whole = Engine(lake)
    try:
        assert eng.scoped
        n = eng.rows("SELECT count(*) FROM spans")[0][0]
        assert 0 < n < whole.rows("SELECT count(*) FROM spans")[0][0] / 2 + 5
        assert dict(eng.rows("SELECT version, count(*) FROM trials GROUP BY 1")) == {"v2": 12, "v3": 13}
    finally:
        eng.close()
        whole.close()


@pytest.mark.parametrize("baseline, candidate", [
    ("version=v2", "version=v3"),               # v3 holds the labelled trace
    ("version=v1,scenario=s0", "version=v4,scenario=s0"),
    ("run=run-v1", "version=v4"),
    ("version=v2,outcome=pass", "version=v3,outcome=pass"),
    ("version=v1,model=m", "version=v2"),
])
def test_the_report_is_the_whole_lakes(lake, baseline, candidate):
    got = run_gate(str(lake), baseline=baseline, candidate=candidate)
    want = _whole_lake(lake, baseline=baseline, candidate=candidate)
    assert got.candidate["trials"] == want.candidate["trials"] > 0
    assert got.baseline["trials"] == want.baseline["trials"] > 0
    _assert_same(_report(got), _report(want))


def test_a_verdict_and_a_separate_baseline_lake(lake, tmp_path):
    config = GateConfig(threshold=0.6)
    got = run_gate(str(lake), config, candidate="version=v3", mode="verdict")
    want = _whole_lake(lake, config=config, candidate="version=v3", mode="verdict")
    assert got.candidate["trials"] == want.candidate["trials"] == 13
    _assert_same(_report(got), _report(want))
    other = write_trials(tmp_path / "baseline", [{"scenario": f"s{i % 2}", "version": v, "outcome": "pass"}
                                                 for v in ("v0", "v1") for i in range(8)], seed=5)
    got = run_gate(str(lake), baseline="version=v0", candidate="version=v4", baseline_lake=str(other))
    base = Engine(other)
    try:
        want = _whole_lake(lake, baseline="version=v0", candidate="version=v4", baseline_lake=base)
    finally:
        base.close()
    assert got.baseline["trials"] == want.baseline["trials"] == 8
    _assert_same(_report(got), _report(want))


@pytest.mark.parametrize("baseline, candidate", [
    ("version=v9", "version=v3"),         # nothing matches: what the whole lake has
    ("version=v2", "version=v2,model=x"),  # a model no trial used
    ("version=v2", "version=v2"),         # the same trials twice
    ("version=", "version="),             # traces that are no trials (no scenario) only
])
def test_errors_are_the_whole_lakes(lake, baseline, candidate):
    def error(fn):
        with pytest.raises(Exception) as e:
            fn()
        return type(e.value), str(e.value)

    got = error(lambda: run_gate(str(lake), baseline=baseline, candidate=candidate))
    want = error(lambda: _whole_lake(lake, baseline=baseline, candidate=candidate))
    assert got == (want[0], want[1].replace("lake: ", f"{lake}: "))
