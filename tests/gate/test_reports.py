"""The report formats: JUnit XML against the shipped XSD (xmlschema), JSON against its
schema (jsonschema), HTML rendered by headless Chromium; and the gate on trials without
outcomes."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from otel_assay.gate import GateConfig, run_gate
from otel_assay.report.html import write_html
from otel_assay.report.json_report import report_dict, schema
from otel_assay.report.junit import write_junit

from .lakes import write_trials

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A blocking result (regressed tools and outcomes) and one from trials without outcomes."""
    root = tmp_path_factory.mktemp("reports")
    trials = [{"scenario": s, "version": "v1", "outcome": "pass" if i % 10 else "fail", "tools": ["lookup", "refund"],
               "index": i} for s in ("refund", "status") for i in range(40)]
    trials += [{"scenario": s, "version": "v2", "outcome": "pass" if i % 3 else "fail", "tools": ["search", "refund"],
                "index": i} for s in ("refund", "status") for i in range(40)]
    lake = write_trials(root / "lake", trials)
    blocked = run_gate(lake, GateConfig(threshold=0.8), baseline="version=v1", candidate="version=v2")
    unknown = [{"scenario": "s", "version": v, "outcome": None, "tools": t}
               for v, t in (("v1", ["lookup"]), ("v2", ["search"])) for _ in range(30)]
    no_outcome = run_gate(write_trials(root / "unknown", unknown), baseline="version=v1", candidate="version=v2")
    return {"blocked": blocked, "no_outcome": no_outcome, "dir": root}


def test_trials_without_outcome_are_judged_by_the_other_checks(results):
    r = results["no_outcome"]
    checks = {c.name: c for c in r.scenarios[0].checks}
    assert checks["regression"].verdict == "SKIPPED" and not checks["regression"].gating
    assert checks["fingerprint"].verdict == "FAIL"  # lookup -> search
    assert r.decision == "block"
    assert any("no outcome" in n for n in r.notes)


def test_trials_of_an_unknown_operation_name_are_named_in_a_note(tmp_path):
    # a model call under an operation name otel-assay does not know is no step: without
    # a tool call its trial is an empty run, left out of the pass rates; the report says so
    trials = [{"scenario": "s", "version": "v1", "outcome": "pass", "index": i} for i in range(20)]
    trials += [{"scenario": "s", "version": "v2", "outcome": "pass", "index": i,
                **({"operation": "summon", "tools": []} if i % 4 == 0 else {})} for i in range(20)]
    r = run_gate(write_trials(tmp_path / "lake", trials), baseline="version=v1", candidate="version=v2")
    assert r.scenarios[0].candidate.excluded == {"empty-run": 5}
    assert ("5 spans in 5 trials have an operation name (gen_ai.operation.name) otel-assay does not read as a "
            "step: summon; 5 of those trials have no LLM or tool step and count as empty runs, left out of the "
            "pass rates") in r.notes


def test_blocked_result(results):
    r = results["blocked"]
    assert r.decision == "block" and r.exit_code == 1
    assert r.suite["pass_rate"]["verdict"] in ("FAIL", "INCONCLUSIVE")
    assert r.suite["fingerprint"]["verdict"] == "FAIL"


@pytest.mark.parametrize("which", ["blocked", "no_outcome"])
def test_json_matches_its_schema(results, which):
    doc = json.loads(json.dumps(report_dict(results[which])))
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.validate(doc, schema(), format_checker=jsonschema.FormatChecker())
    assert doc["schema_version"].startswith("1.")


@pytest.mark.parametrize("which", ["blocked", "no_outcome"])
def test_junit_is_valid_against_the_junit_schema(results, which, tmp_path):
    import xml.etree.ElementTree as ET

    import xmlschema

    xsd = xmlschema.XMLSchema(str(resources.files("otel_assay.report") / "schemas" / "junit.xsd"))
    path = tmp_path / "junit.xml"
    write_junit(results[which], path)
    xsd.validate(str(path))
    root = ET.parse(path).getroot()
    cases = root.findall(".//testcase")
    assert int(root.get("tests")) == len(cases)
    by = {(c.get("classname"), c.get("name")): c for c in cases}
    if which == "blocked":
        assert by[("otel-assay.refund", "fingerprint")].find("failure") is not None
        assert by[("otel-assay", "decision")].find("failure") is not None
        props = {p.get("name") for p in root.iter("property")}
        assert {"regression.pvalue", "fingerprint.t2", "fingerprint.d_eff"} <= props
        cov = by[("otel-assay", "coverage")].find("system-out").text
        assert cov.startswith("PASS (reported only, not part of the decision): no coverage minimum"), cov
    else:
        skipped = by[("otel-assay.s", "regression")].find("skipped")
        assert skipped is not None and "no baseline trial has an outcome" in skipped.get("message")


def test_junit_suite_names_are_unique_whatever_the_scenarios_are_called(tmp_path):
    import xml.etree.ElementTree as ET

    trials = [{"scenario": s, "version": v, "outcome": "pass", "tools": ["lookup"], "index": i}
              for s in ("gate", "otel-assay") for v in ("v1", "v2") for i in range(20)]
    r = run_gate(write_trials(tmp_path / "lake", trials), baseline="version=v1", candidate="version=v2")
    write_junit(r, tmp_path / "junit.xml")
    names = [s.get("name") for s in ET.parse(tmp_path / "junit.xml").getroot().iter("testsuite")]
    assert len(names) == len(set(names)) == 3, names


def test_two_versions_that_ran_at_the_same_time_compare_in_name_order(tmp_path):
    # as the demo runs them: which trial happened to start first picked the baseline
    trials = [{"scenario": "s", "version": v, "outcome": "pass", "tools": ["lookup"], "index": i}
              for i in range(12) for v in ("v2", "v1")]
    r = run_gate(write_trials(tmp_path / "lake", trials))
    assert (r.baseline["selection"], r.candidate["selection"]) == ("version=v1", "version=v2")
    later = [{"scenario": "s", "version": v, "outcome": "pass", "tools": ["lookup"], "index": i}
             for v in ("v2", "v1") for i in range(12)]  # v2 ran first, then v1: v2 is the older
    r = run_gate(write_trials(tmp_path / "later", later))
    assert (r.baseline["selection"], r.candidate["selection"]) == ("version=v2", "version=v1")


def test_junit_schema_rejects_a_malformed_report(tmp_path):
    import xmlschema

    xsd = xmlschema.XMLSchema(str(resources.files("otel_assay.report") / "schemas" / "junit.xsd"))
    bad = tmp_path / "bad.xml"
    bad.write_text('<testsuites><testsuite name="x" tests="1" failures="0" errors="0">'
                   '<testcase name="a"/></testsuite></testsuites>')  # testcase without classname
    assert not xsd.is_valid(str(bad))


def _chromium(args: list[str], user_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={user_dir}", "--enable-logging=stderr", "--v=0", *args],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="headless Chromium is not installed "
                    "(apt-get install -y chromium)")
def test_html_renders_in_chromium(results, tmp_path):
    page = tmp_path / "report.html"
    write_html(results["blocked"], page)
    shot = tmp_path / "report.png"
    p = _chromium(["--window-size=1200,2600", f"--screenshot={shot}", page.as_uri()], tmp_path / "profile1")
    assert shot.exists() and shot.stat().st_size > 20_000, p.stderr[-2000:]
    if os.environ.get("OTEL_ASSAY_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["OTEL_ASSAY_KEEP_SCREENSHOT"])
    console = [line for line in p.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    dom = _chromium(["--dump-dom", page.as_uri()], tmp_path / "profile2")
    assert dom.returncode == 0, dom.stderr[-2000:]
    for plot in ("plot-pass-rates", "plot-sprt", "plot-t2", "plot-coverage", "plot-pca-0"):
        assert f'id="{plot}"' in dom.stdout, plot
    assert "<polyline" in dom.stdout and "<circle" in dom.stdout
    assert "BLOCK (exit 1)" in dom.stdout


def test_report_command_prints_the_exit_code_the_gate_would_have(results, tmp_path):
    """`report` exits 0 whatever the decision; its terminal report said "decision: BLOCK
    (exit 1)" (only -q said "the gate would exit 1"), which a CI log then contradicted."""
    from .conftest import cli

    p = cli("report", results["dir"] / "lake", "--baseline", "version=v1", "--candidate", "version=v2",
            "--threshold", "0.8", "--json", tmp_path / "r.json")
    assert p.returncode == 0, p.stderr
    assert "decision: BLOCK (the gate would exit 1)" in p.stdout, p.stdout
    assert "(exit 1)" not in p.stdout
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 1  # the gate's, as documented
    g = cli("gate", results["dir"] / "lake", "--baseline", "version=v1", "--candidate", "version=v2",
            "--threshold", "0.8")
    assert g.returncode == 1 and "decision: BLOCK (exit 1)" in g.stdout, g.stdout


def test_regress_does_not_deny_a_configured_coverage_minimum(results):
    # regress ignores min_coverage; its coverage reason said "no coverage minimum configured"
    # of a config that had one
    lake = results["dir"] / "lake"
    r = run_gate(lake, GateConfig(min_coverage=0.5), baseline="version=v1", candidate="version=v2", mode="regress")
    assert r.coverage["verdict"] == "SKIPPED" and r.coverage["minimum"] is None
    assert r.coverage["reason"] == "regress does not judge coverage (min_coverage 0.5 is for gate): reported only"
    r = run_gate(lake, GateConfig(), baseline="version=v1", candidate="version=v2", mode="regress")
    assert r.coverage["reason"] == "no coverage minimum configured: reported only"


def test_terminal_report_says_why_overall_coverage_is_zero(results):
    import copy
    import io

    from otel_assay.report.terminal import render

    r = copy.copy(results["blocked"])
    out = io.StringIO()
    render(r, out)
    assert r.coverage["overall"] > 0 and "geometric mean" not in out.getvalue()
    # the demo's case: no boundary inputs exercised, so the geometric mean is 0
    r.coverage = {**r.coverage, "overall": 0.0,
                  "dimensions": [{**d, "value": 0.0} if d["name"] == "boundary" else d for d in r.coverage["dimensions"]]}
    out = io.StringIO()
    render(r, out)
    assert "geometric mean of the dimensions: 0 because boundary coverage is 0" in " ".join(out.getvalue().split())


def test_a_feature_constant_within_each_arm_shows_where_it_moved(results, tmp_path):
    import io

    from otel_assay.report.terminal import render

    # every v1 trial calls lookup, no v2 trial does: no spread to measure the shift in
    r = results["blocked"]
    top = {f["name"]: f for c in r.scenarios[0].checks if c.name == "fingerprint" for f in c.stats["top_features"]}
    assert top["tool:lookup"]["smd"] is None
    out = io.StringIO()
    render(r, out)
    text = " ".join(out.getvalue().split())
    assert "tool:lookup 0.333→0" in text and "±inf" not in text
    write_html(r, tmp_path / "r.html")
    assert "tool:lookup (0.333→0)" in (tmp_path / "r.html").read_text()


def test_a_feature_constant_in_the_baseline_alone_is_shown_in_its_units(tmp_path):
    import io

    from otel_assay.report.terminal import render

    # every baseline trial calls lookup once (n_steps always 2); the candidate calls it once
    # or twice: the SD of that shift is the candidate's spread alone, and it read "-207 SD"
    trials = [{"scenario": "s", "version": "v1", "outcome": "pass", "index": i} for i in range(30)]
    trials += [{"scenario": "s", "version": "v2", "outcome": "pass", "index": i,
                "tools": ["lookup"] * (1 + i % 2)} for i in range(30)]
    r = run_gate(write_trials(tmp_path / "lake", trials), baseline="version=v1", candidate="version=v2")
    (fp,) = [c for c in r.scenarios[0].checks if c.name == "fingerprint"]
    top = {f["name"]: f for f in fp.stats["top_features"]}
    steps = top["n_steps"]
    assert (steps["baseline_sd"], steps["baseline_mean"], steps["candidate_mean"]) == (0.0, 2.0, pytest.approx(2.5))
    assert steps["candidate_sd"] > 0 and steps["smd"] is not None
    out = io.StringIO()
    render(r, out)
    text = " ".join(out.getvalue().split())
    assert "n_steps 2→2.5, constant in the baseline" in text
    write_html(r, tmp_path / "r.html")
    assert "n_steps (2→2.5, constant in the baseline)" in (tmp_path / "r.html").read_text()


def test_an_unbounded_t2_is_said_in_words(results):
    import io

    from otel_assay.report.terminal import render

    r = copy.deepcopy(results["blocked"])
    for c in r.scenarios[0].checks:
        if c.name == "fingerprint":
            c.stats["t2"] = None   # how the check records an infinite T² (JSON has no infinity)
    out = io.StringIO()
    render(r, out)
    text = " ".join(out.getvalue().split())
    assert "T²=inf" not in text
    assert "T² unbounded: the arms separate completely (no spread within them along the shift)" in text


def test_emitting_into_a_lake_that_cannot_be_written_is_an_emit_error(results, tmp_path, monkeypatch):
    # as root a read-only directory is still writable, so the lake's own check is made to fail
    from otel_assay.lake.files import Lake, LakeError
    from otel_assay.report.otel import EmitError, emit_results

    def refuse(self):
        raise LakeError(f"lake directory {self.root} is not writable")

    monkeypatch.setattr(Lake, "ensure_writable", refuse)
    with pytest.raises(EmitError, match="not writable"):
        emit_results(results["blocked"], "lake", tmp_path / "lake")


def test_hostile_names_are_printed_as_data(tmp_path):
    """Scenario and tool names are span data: rich markup, emoji codes and terminal escape
    sequences in them are shown literally, and the JUnit file still parses."""
    import io
    import xml.etree.ElementTree as ET

    import xmlschema

    from otel_assay.report.output import write_table
    from otel_assay.report.terminal import render

    name = "[/oops] [bold]x :smile: \x1b]0;owned\x07\x1b[2J"
    trials = [{"scenario": name, "version": v, "outcome": "pass" if i % 4 else "fail", "tools": [f"t[/b]\x1b{v}"],
               "index": i} for v in ("v1", "v2") for i in range(20)]
    r = run_gate(write_trials(tmp_path / "lake", trials), baseline="version=v1", candidate="version=v2")
    for color in (False, True):
        out = io.StringIO()
        render(r, out, color=color)
        text = out.getvalue()
        assert "\x1b]0;" not in text and "\x07" not in text and "\x1b[2J" not in text
        assert "[/oops]" in text and ":smile:" in text and "\\x1b]0;owned\\x07" in text
    path = tmp_path / "junit.xml"
    write_junit(r, path)
    xmlschema.XMLSchema(str(resources.files("otel_assay.report") / "schemas" / "junit.xsd")).validate(str(path))
    suites = [s.get("name") for s in ET.parse(path).getroot().iter("testsuite")]
    assert f"otel-assay.{name}".replace("\x1b", "\\x1b").replace("\x07", "\\x07") in suites

    class Tty(io.StringIO):
        def isatty(self):
            return True

    import pyarrow as pa
    for out in (io.StringIO(), Tty()):
        write_table(pa.table({"scenario": [name]}), "table", out)
        assert "[/oops] [bold]x :smile: \\x1b]0;owned\\x07\\x1b[2J" in out.getvalue()


def test_every_verdict_reaches_the_lake_when_there_are_many(tmp_path):
    """The OTel SDK keeps 128 events per span and silently dropped the oldest: with 50
    scenarios the first scenarios' verdicts went missing while "emitted 151" was printed."""
    from otel_assay.analyze.engine import Engine

    from .conftest import cli

    lake = write_trials(tmp_path / "lake", [{"scenario": f"s{s:02d}", "version": v, "outcome": "pass", "index": i}
                                            for v in ("v1", "v2") for s in range(50) for i in range(3)])
    p = cli("gate", lake, "--baseline", "version=v1", "--candidate", "version=v2", "--emit-otel", "lake", "-q")
    assert p.returncode == 2 and "emitted 151 gen_ai.evaluation.result events" in p.stderr, p.stderr
    with Engine(lake) as eng:
        rows = eng.rows("SELECT e.attributes['assay.scenario.evaluated'], e.attributes['gen_ai.evaluation.name'] "
                        "FROM span_events e JOIN spans s USING (trace_id, span_id) WHERE s.name = 'assay.gate'")
        assert eng.rows("SELECT sum(dropped_events_count) FROM spans WHERE name = 'assay.gate'")[0][0] == 0
    assert len(rows) == 151
    assert {s for s, _ in rows if s} == {f"s{s:02d}" for s in range(50)}
    assert (None, "otel-assay.decision") in rows


def test_more_verdicts_than_a_lake_keeps_on_one_span_go_to_child_spans(results, tmp_path):
    import copy

    from otel_assay.analyze.engine import Engine
    from otel_assay.report.otel import emit_results

    r = copy.copy(results["blocked"])
    r.scenarios = [copy.copy(s) for s in r.scenarios for _ in range(300)]   # > 1,024 check events
    n = emit_results(r, "lake", tmp_path / "lake")
    assert n > 1024
    with Engine(tmp_path / "lake") as eng:
        assert eng.rows("SELECT count(*) FROM span_events")[0][0] == n
        assert eng.rows("SELECT sum(dropped_events_count) FROM spans")[0][0] == 0
        spans = eng.rows("SELECT count(*), count(*) FILTER (WHERE parent_span_id IS NULL) FROM spans "
                         "WHERE name = 'assay.gate'")[0]
        assert spans[0] >= 2 and spans[1] == 1
        # the decision is on the root span
        assert eng.rows("SELECT s.parent_span_id IS NULL FROM span_events e JOIN spans s USING (trace_id, span_id) "
                        "WHERE e.attributes['gen_ai.evaluation.name'] = 'otel-assay.decision'") == [(True,)]


def _renamed(result, names: dict[str, str], thresholds: dict[str, float | None] | None = None):
    """A copy of ``result`` with its scenarios renamed (and their thresholds set)."""
    import copy
    import dataclasses

    r = copy.deepcopy(result)
    for s in r.scenarios:
        th = (thresholds or {}).get(s.scenario, s.settings.threshold)
        s.settings = dataclasses.replace(s.settings, threshold=th)
        s.scenario = names.get(s.scenario, s.scenario)
    r.plots = {k: {names.get(s, s): v for s, v in d.items()} if isinstance(d, dict) else d for k, d in r.plots.items()}
    return r


def _svg_labels(svg: str) -> list[tuple[float, str, str]]:
    """(x, shown text, tooltip) of the right-aligned labels of a plot."""
    import html
    import re

    out = []
    for m in re.finditer(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="end">(.*?)</text>', svg):
        title = re.search(r"<title>(.*?)</title>", m.group(2))
        shown = re.sub(r"<title>.*?</title>", "", m.group(2))
        out.append((float(m.group(1)), html.unescape(shown), html.unescape(title.group(1)) if title else ""))
    return out


def test_html_plot_labels_fit_long_and_wide_scenario_names(results):
    """A long scenario name ran off the left edge of the pass-rate and T² plots (SVG text does
    not wrap), and a long unbroken one made the scenario table wider than the page."""
    from otel_assay.report.html import _text_width, html_report, pass_rate_plot, t2_plot

    long = "a" * 120 + " very long scenario name"
    r = _renamed(results["blocked"], {"refund": long, "status": "払い戻し" * 12})
    for svg in (pass_rate_plot(r), t2_plot(r)):
        labels = _svg_labels(svg)
        assert labels
        for x, shown, title in labels:
            assert _text_width(shown) <= x, (shown, x)
        # a cut name keeps the whole name as its tooltip, and the row its version
        assert any(title.startswith(long) for _, _, title in labels)
    assert {shown.rsplit(" · ", 1)[-1] for _, shown, _ in _svg_labels(pass_rate_plot(r))} == {"baseline", "candidate"}
    assert f"<td class='name'>{long}</td>" in html_report(r) and "td.name,td.why" in html_report(r)


def test_html_sprt_legend_stays_inside_the_plot_with_many_scenarios(results):
    """With 25 scenarios the legend (13 px a line, over the plot) ran past the bottom of the
    picture and over the axis label."""
    import re

    from otel_assay.report.html import sprt_plot

    r = _renamed(results["blocked"], {})
    one = next(iter(r.plots["sprt"].values()))
    r.plots["sprt"] = {f"scenario-{i:02d}": dict(one) for i in range(25)}
    svg = sprt_plot(r)
    height = float(re.search(r'<svg[^>]* height="(\d+)"', svg).group(1))
    legend = re.findall(r'<text x="[\d.]+" y="([\d.]+)" fill="#', svg)
    assert len(legend) == 25 and max(float(y) for y in legend) <= height - 2
    axis = float(re.search(r'y="([\d.]+)" text-anchor="middle">trials \(candidate', svg).group(1))
    assert min(float(y) for y in legend) > axis
    # and 24 of them are 24 different lines: past eight the colours repeat, the dashes do not
    lines = re.findall(r'<polyline [^>]*stroke="(#\w+)"( stroke-dasharray="[\d ]+")? stroke-width', svg)
    assert len(lines) == 25 and len(set(lines[:24])) == 24


def test_html_t2_plot_draws_the_smallest_statistic_with_a_length(results):
    """The log axis began at the smallest T², so that scenario's bar had no length at all."""
    import re

    from otel_assay.report.html import t2_plot

    r = _renamed(results["blocked"], {})
    r.plots["t2"] = {"a": {"t2": 0.632, "critical": 6.7, "verdict": "PASS"},
                     "b": {"t2": 0.698, "critical": 6.7, "verdict": "PASS"}}
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="[\d.]+" width="([\d.]+)"', t2_plot(r))]
    assert len(widths) == 2 and min(widths) > 20
    assert "a bar past the tick FAILs" in t2_plot(r)


def test_html_pass_rate_plot_draws_a_per_scenario_threshold_on_its_own_rows(results):
    """θ=0.6 for one scenario and 0.8 for the other were both drawn across every row, as if
    each scenario were judged against both."""
    from otel_assay.report.html import pass_rate_plot

    svg = pass_rate_plot(_renamed(results["blocked"], {}, {"refund": 0.6, "status": 0.8}))
    assert ">θ=0.6</text>" not in svg and ">θ=0.8</text>" not in svg
    assert "<title>refund: θ=0.6</title>" in svg and "<title>status: θ=0.8</title>" in svg
    assert ">θ=0.8</text>" in pass_rate_plot(_renamed(results["blocked"], {}, {"refund": 0.8, "status": 0.8}))


def test_junit_manual_decision_is_a_failure_and_dotted_scenarios_stay_one_class(tmp_path):
    """A manual decision exits 2 and fails the job: a check-run built from the file showed it
    green (the decision was a skipped case). Jenkins split `otel-assay.refund.v2` into a
    package `otel-assay.refund` and a class `v2`."""
    import xml.etree.ElementTree as ET

    import xmlschema

    trials = [{"scenario": "refund.v2", "version": v, "outcome": "pass", "tools": ["lookup"], "index": i}
              for v in ("v1", "v2") for i in range(3)]  # too few trials to decide anything
    r = run_gate(write_trials(tmp_path / "lake", trials), baseline="version=v1", candidate="version=v2")
    assert r.decision == "manual" and r.exit_code == 2
    path = tmp_path / "junit.xml"
    write_junit(r, path)
    xmlschema.XMLSchema(str(resources.files("otel_assay.report") / "schemas" / "junit.xsd")).validate(str(path))
    root = ET.parse(path).getroot()
    decision = [c for c in root.iter("testcase") if c.get("name") == "decision"][0]
    failure = decision.find("failure")
    assert failure is not None and failure.get("type") == "MANUAL" and failure.get("message").startswith("manual")
    assert int(root.get("failures")) >= 1
    scenario_cases = [c for c in root.iter("testcase") if c.get("classname") != "otel-assay"]
    assert scenario_cases and {c.get("classname") for c in scenario_cases} == {"otel-assay.refund\u2024v2"}
    assert "otel-assay.refund.v2" in [s.get("name") for s in root.iter("testsuite")]


def test_plain_tables_align_wide_characters_by_terminal_cells():
    """A CJK scenario name counts two terminal cells per character: padded by characters,
    every later column of its row was pushed out of line, and clipping cut at the wrong place."""
    import io

    import pyarrow as pa
    from rich.cells import cell_len

    from otel_assay.report.output import write_table

    out = io.StringIO()
    write_table(pa.table({"scenario": ["退款请求", "refund", "長" * 40], "n": [12, 7, 3]}), "table", out, max_width=20)
    lines = out.getvalue().splitlines()[:5]
    starts = {cell_len(line[:line.rindex(" ") + 1]) for line in lines[2:]}  # where the n column begins
    assert len(starts) == 1 and cell_len(lines[0][:lines[0].index("n", 8)]) in starts, lines
    clipped = lines[4].split("  ")[0]
    assert clipped.startswith("長" * 9) and clipped.endswith("…") and cell_len(clipped) == 20


def test_a_scenario_no_check_gates_is_skipped_in_every_report_not_inconclusive(tmp_path):
    """A scenario left with reported-only or SKIPPED checks read INCONCLUSIVE in every report
    while the decision was deploy: the reports said something held back a deploy that happened."""
    import io
    import xml.etree.ElementTree as ET

    import xmlschema

    from otel_assay.gate import parse_config
    from otel_assay.report.terminal import render

    trials = [{"scenario": s, "version": v, "outcome": None if s == "unknown" else "pass", "tools": ["lookup"],
               "index": i} for s in ("gated", "reported", "unknown") for v in ("v1", "v2") for i in range(60)]
    # "reported": stability only (reported, not gating); "unknown": regression SKIPPED (no outcomes)
    cfg = parse_config("scenarios:\n"
                       "  reported: {checks: {regression: false, fingerprint: false}}\n"
                       "  unknown: {checks: {fingerprint: false}}\n")
    r = run_gate(write_trials(tmp_path / "lake", trials), cfg, baseline="version=v1", candidate="version=v2")
    assert r.decision == "deploy", r.reasons
    verdicts = {s.scenario: s.verdict for s in r.scenarios}
    assert verdicts == {"gated": "PASS", "reported": "SKIPPED", "unknown": "SKIPPED"}, verdicts

    doc = json.loads(json.dumps(report_dict(r)))
    jsonschema.validate(doc, schema(), format_checker=jsonschema.FormatChecker())
    assert doc["schema_version"] == "1.3"
    assert {s["scenario"]: s["verdict"] for s in doc["scenarios"]} == verdicts

    out = io.StringIO()
    render(r, out)
    rows = {line.split()[0]: line.split()[-1] for line in out.getvalue().splitlines()
            if line.split()[:1] in (["gated"], ["reported"], ["unknown"]) and "/" in line}
    assert rows == {"gated": "PASS", "reported": "skip", "unknown": "skip"}, out.getvalue()
    assert "verdict skip = no check gates the scenario: not part of the decision" in out.getvalue()

    write_html(r, tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    table = html[html.index("<td class='name'>gated</td>"):]
    table = table[:table.index("</table>")]
    assert "INCONCLUSIVE" not in table and table.count("no check gates it: not part of the decision") == 2

    path = tmp_path / "junit.xml"
    write_junit(r, path)
    xmlschema.XMLSchema(str(resources.files("otel_assay.report") / "schemas" / "junit.xsd")).validate(str(path))
    root = ET.parse(path).getroot()
    assert root.get("failures") == "0"
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert all(suites[f"otel-assay.{s}"].find("testcase/failure") is None for s in ("reported", "unknown"))


def test_a_stored_baseline_of_one_run_says_what_it_assumes():
    import numpy as np

    from otel_assay.gate.run import _Side, stored_baseline_note

    day = 86_400 * 10**9
    t0 = 1_750_000_000 * 10**9

    def side(runs, starts):
        return _Side(eng=None, lake="l", table="t", selector=None, runs=runs,
                     cols={"start_time_unix_nano": np.array(starts, dtype=np.int64)})

    note = stored_baseline_note(side(["r1"], [t0, t0 + 60 * 10**9]), side(["r2"], [t0 + 3 * day]))
    assert "one run (r1) recorded 3 days before the candidate" in note and "same job" in note
    # the same job (minutes apart), several baseline runs, or no baseline: nothing to say
    assert stored_baseline_note(side(["r1"], [t0]), side(["r2"], [t0 + 600 * 10**9])) == ""
    assert stored_baseline_note(side(["r1", "r0"], [t0]), side(["r2"], [t0 + 3 * day])) == ""
    assert stored_baseline_note(None, side(["r2"], [t0])) == ""


def test_plan_says_how_many_trials_before_any_is_spent(tmp_path):
    import json

    from .conftest import cli
    from .lakes import write_trials

    trials = ([{"scenario": "a", "version": "v1", "outcome": "pass" if i % 10 else "fail", "cost": 0.01}
               for i in range(40)]
              + [{"scenario": "b", "version": "v1", "outcome": "pass" if i % 2 else "fail"} for i in range(40)])
    lake = write_trials(tmp_path / "lake", trials)
    p = cli("plan", lake, "--baseline", "version=v1", "--json", tmp_path / "plan.json")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("a: baseline pass rate 0.90 (40 trials); unchanged: ") and "$" in lines[0], lines
    assert lines[1].startswith("b: baseline pass rate 0.50 (40 trials)"), lines
    doc = json.loads((tmp_path / "plan.json").read_text())
    a, b = doc["scenarios"]
    # a rate near 1 decides sooner than one at 0.5; the FAIL side is held to the family's
    # level (regression and fingerprint in two scenarios: alpha / 4 for Holm)
    assert a["unchanged"]["mean_trials"] < b["unchanged"]["mean_trials"]
    assert doc["fail_level"] == 0.05 / 4 and a["cost_per_trial"] == pytest.approx(0.01)
    # only 40 baseline trials to pair with: a plan that needs more says so
    assert b["unchanged"]["n_max"] == 40 and "more than 40" in lines[1]
    p = cli("plan", "--rate", "0.8")
    assert p.returncode == 0 and p.stdout.startswith("(stated): baseline pass rate 0.80; unchanged: "), p.stdout
    for args, code, needle in [((), 3, "give a lake with its baseline"), (("--rate", "1.5"), 3, "--rate"),
                               ((tmp_path / "nowhere", "--baseline", "version=v1"), 4, "nowhere"),
                               ((lake, "--baseline", "version=v9"), 4, "version=v9")]:
        p = cli("plan", *args)
        assert p.returncode == code and needle in p.stdout + p.stderr and "Traceback" not in p.stderr, (args, p)
