"""otel-assay run with the baseline agent run in the same job (--baseline-agent,
--baseline-version): the two arms' trials interleave index by index, both are recorded under
their own version, the regression test and the gate pair them by trial index, a run resumes
both arms, and bad flags are refused before any trial. Real trial API, real lake, real
DuckDB; scripted offline agents (tests/live/agents.py)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from otel_assay.analyze.engine import Engine
from otel_assay.errors import UsageError
from otel_assay.live.runner import run_suite

from .agents import AsyncRouter, Router
from .test_run import ROUTING, cli, suite


def trials(lake):
    """(version, trial_index, counted, run_id, start, end) of every trial, in start order."""
    with Engine(lake) as eng:
        return eng.con.execute("SELECT version, trial_index, counted, run_id, start_time_unix_nano, "
                               "start_time_unix_nano + duration_ns FROM trials "
                               "ORDER BY start_time_unix_nano, trace_id").fetchall()


def test_a_regressed_candidate_is_stopped_on_trials_interleaved_with_the_baseline(tmp_path):
    lake = str(tmp_path / "lake")
    r = run_suite(suite(), Router(0.3, seed=2), version="v2", lake=lake, concurrency=1,
                  baseline_agent=Router(0.95, seed=1), baseline_version="v1")
    s, b = r.scenarios[0], r.baseline_scenarios[0]
    assert (s.decision, s.stop_reason) == ("FAIL", "boundary") and 5 < s.n < 40, (s.decision, s.stop_reason, s.n)
    assert r.gate.decision == "block" and r.exit_code == 1
    rows = trials(lake)
    # one trial at a time: index by index, each index's two trials next to each other, the
    # order within the pair alternating (baseline first at even indices)
    assert [(v, i) for v, i, *_ in rows] == [
        pair for i in range(s.n) for pair in ([("v1", i), ("v2", i)] if i % 2 == 0 else [("v2", i), ("v1", i)])]
    assert (b.ran, b.n, r.baseline_version) == (s.n, s.n, "v1")
    assert len({run for *_, run, _s, _e in rows}) == 1  # one job, one run id: the gate sees no stored baseline
    reg = r.gate.scenarios[0].check("regression")
    assert reg.verdict == "FAIL", reg.reason
    assert (reg.stats["paired_by"], reg.stats["pairs"]) == ("trial index", s.n)
    assert (reg.stats["baseline_successes"], reg.stats["candidate_successes"]) == (b.successes, s.successes)
    assert not any("recorded" in n and "before the candidate" in n for n in r.gate.notes), r.gate.notes
    d = r.as_dict()
    assert d["baseline"]["version"] == "v1" and d["baseline"]["scenarios"][0]["n"] == s.n


def test_with_room_for_two_trials_an_index_runs_both_arms_side_by_side(tmp_path):
    lake = str(tmp_path / "lake")
    # an async baseline next to a sync candidate: each arm runs its agent its own way
    r = run_suite(suite(method="fixed", trials=6), Router(0.95, seed=3, sleep=0.03), version="v2", lake=lake,
                  concurrency=2, baseline_agent=AsyncRouter(0.95, seed=1, sleep=0.03), baseline_version="v1")
    assert r.scenarios[0].n == r.baseline_scenarios[0].n == 6
    by = {(v, i): (start, end) for v, i, _c, _r, start, end in trials(lake)}
    assert sorted(by) == sorted((v, i) for v in ("v1", "v2") for i in range(6))
    for i in range(6):
        (b0, b1), (c0, c1) = by[("v1", i)], by[("v2", i)]
        assert b0 < c1 and c0 < b1, i  # the two trials of index i overlap in time
        if i:
            assert max(b0, c0) >= min(by[("v1", i - 1)][1], by[("v2", i - 1)][1]), i  # after the last index's


def test_an_unchanged_candidate_is_not_blocked(tmp_path):
    r = run_suite(suite(n_max=60), Router(0.95, seed=3), version="v2", lake=str(tmp_path), concurrency=2,
                  baseline_agent=Router(0.95, seed=1), baseline_version="v1")
    s = r.scenarios[0]
    assert s.decision in ("PASS", "INCONCLUSIVE") and s.stop_reason in ("boundary", "n_max"), (s.decision, s.n)
    assert s.stop_reason != "baseline"  # the baseline grows with the candidate: it never runs out
    assert r.gate.decision in ("deploy", "manual") and r.exit_code in (0, 2)
    assert r.gate.scenarios[0].check("regression").verdict != "FAIL"


@pytest.mark.parametrize("budget", [140 * 6, 140 * 5])  # stopped after three pairs / inside the third
def test_an_interrupted_run_resumes_both_arms_to_the_same_decision(tmp_path, budget):
    """Outcomes are a function of (seed, index), so a run stopped by its budget and resumed
    decides as a run that was never stopped; a pair the budget split stays unpaired."""
    def go(lake, **kw):
        return run_suite(suite(), Router(0.3, seed=2), version="v2", lake=lake, concurrency=1,
                         baseline_agent=Router(0.95, seed=1), baseline_version="v1", **kw)

    whole = go(str(tmp_path / "whole")).scenarios[0]
    lake = str(tmp_path / "lake")
    first = go(lake, budget_tokens=budget)
    assert first.scenarios[0].stop_reason == "budget" and first.scenarios[0].decision == "INCONCLUSIVE"
    split = budget == 140 * 5
    again = go(lake)
    s, b = again.scenarios[0], again.baseline_scenarios[0]
    assert (s.resumed, b.resumed) == (3 - split, 3)
    rows = trials(lake)
    idx = {v: sorted(i for w, i, *_ in rows if w == v) for v in ("v1", "v2")}
    assert len(set(idx["v2"])) == len(idx["v2"]) and len(set(idx["v1"])) == len(idx["v1"])  # no index run twice
    if split:  # index 2 ran for the baseline only; the resumed run went on at 3
        assert 2 in idx["v1"] and 2 not in idx["v2"] and 3 in idx["v2"]
        assert s.decision == "FAIL"
    else:
        assert (s.decision, s.n, s.successes) == (whole.decision, whole.n, whole.successes)
    reg = again.gate.scenarios[0].check("regression")
    assert reg.stats["pairs"] == len(set(idx["v1"]) & set(idx["v2"])), reg.stats
    assert reg.stats["unused_baseline"] == int(split), reg.stats
    # decided: a third run runs nothing
    third = go(lake)
    assert third.scenarios[0].ran == third.baseline_scenarios[0].ran == 0
    assert third.scenarios[0].stop_reason == "resumed"


def uninstrumented(text):
    return "billing"  # right, but records no step: its trials are empty runs, excluded


def test_an_uninstrumented_baseline_agent_stops_the_run_with_a_hint(tmp_path, capsys):
    from otel_assay.live.display import render_result

    r = run_suite(suite(), Router(0.95, seed=3), version="v2", lake=str(tmp_path), concurrency=1,
                  baseline_agent=uninstrumented, baseline_version="v1")
    s, b = r.scenarios[0], r.baseline_scenarios[0]
    assert (s.decision, s.stop_reason) == ("INCONCLUSIVE", "baseline empty-runs"), (s.decision, s.stop_reason)
    assert (b.ran, b.excluded, b.n) == (5, 5, 0) and s.ran <= 5
    render_result(r)
    assert "no trial of the baseline agent (--baseline-agent) recorded an LLM call" in capsys.readouterr().err


def test_library_refusals(tmp_path):
    lake = str(tmp_path / "lake")
    with pytest.raises(UsageError, match="both version 'v1'"):
        run_suite(suite(), Router(0.9), version="v1", lake=lake, baseline_agent=Router(0.9), baseline_version="v1")
    with pytest.raises(UsageError, match="needs both its agent"):
        run_suite(suite(), Router(0.9), version="v2", lake=lake, baseline_agent=Router(0.9))
    with pytest.raises(UsageError, match="not both"):
        run_suite(suite(), Router(0.9), version="v2", lake=lake, baseline="version=v1",
                  baseline_agent=Router(0.9), baseline_version="v1")


# the CLI tests' scenario file, with a stored baseline of its own
SCENARIOS = ROUTING.replace("name: routing\n", "name: routing\nbaseline: version=v0\n", 1)



def test_cli_runs_both_and_gates_on_this_jobs_baseline(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIOS)  # its stored baseline (v0, not in the lake) gives way to the one run alongside
    lake = str(tmp_path / "lake")
    report = tmp_path / "r.json"
    r = CliRunner().invoke(cli(), ["run", str(f), "--agent", "tests.live.agents:bad", "--version", "v2",
                                   "--baseline-agent", "tests.live.agents:good", "--baseline-version", "v1",
                                   "--dir", lake, "--json", str(report)])
    assert r.exit_code == 1, r.output
    assert "baseline @ v1, run alongside" in r.output and "block" in r.output.lower()
    d = json.loads(report.read_text())
    assert d["decision"] == "block" and d["baseline"]["version"] == "v1"
    n = d["scenarios"][0]["n"]
    with Engine(lake) as eng:
        got = eng.con.execute("SELECT version, count(DISTINCT trial_index) FROM trials GROUP BY 1 ORDER BY 1").fetchall()
    assert got == [("v1", n), ("v2", n)]


@pytest.mark.parametrize("extra,needle", [
    (["--baseline", "version=v1", "--baseline-agent", "tests.live.agents:good", "--baseline-version", "v1"],
     "not both"),
    (["--baseline-agent", "tests.live.agents:good"], "go together"),
    (["--baseline-version", "v1"], "go together"),
    (["--baseline-agent", "tests.live.no_such_module:agent", "--baseline-version", "v1"], "cannot import"),
    (["--baseline-agent", "tests.live.agents:nothing", "--baseline-version", "v1"], "has no attribute"),
    (["--baseline-agent", "tests.live.agents:good", "--baseline-version", "v2"], "both version 'v2'"),
    (["--baseline-agent", "tests.live.agents:good", "--baseline-version", "stored"], "did not run alongside"),
])
def test_cli_bad_baseline_flags_are_refused_before_any_trial(tmp_path, extra, needle):
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIOS.replace("baseline: version=v0\n", ""))
    lake = str(tmp_path / "lake")
    args = ["run", str(f), "--agent", "tests.live.agents:good", "--dir", lake, "-q"]
    # a stored run of version "stored": a run alongside must not pair with it
    assert CliRunner().invoke(cli(), args + ["--version", "stored"]).exit_code == 0
    r = CliRunner().invoke(cli(), args + ["--version", "v2", *extra])
    assert r.exit_code == 3, r.output
    assert needle in r.output and "Traceback" not in r.output, r.output
    with Engine(lake) as eng:
        assert eng.con.execute("SELECT count(*) FROM trials WHERE version = 'v2'").fetchall() == [(0,)]
