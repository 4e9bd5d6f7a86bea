"""The gate end to end through the real CLI, on lakes written by the real example agent."""

from __future__ import annotations

import json
import os
import socket

import jsonschema
import pytest

from .conftest import REPO, UNCHANGED, cli

pytestmark = pytest.mark.slow


def _config(tmp_path, text: str):
    p = tmp_path / "assay.yaml"
    p.write_text(text)
    return p


def test_unchanged_candidates_deploy(agent_lakes, tmp_path):
    # delta 0.15: at 100 trials per version a non-inferiority PASS against 0.10 would need
    # more trials than a fast test should run (n* is in the report).
    cfg = _config(tmp_path, "delta: 0.15\n")
    codes = {}
    for v in UNCHANGED:
        p = cli("gate", agent_lakes["lake"], "--baseline", "version=v1", "--candidate", f"version={v}",
                "--config", cfg)
        assert p.returncode in (0, 1, 2), p.stderr
        codes[v] = (p.returncode, p.stdout[-1500:])
    deployed = [v for v, (code, _) in codes.items() if code == 0]
    assert len(deployed) >= len(UNCHANGED) - 1, codes


def test_regressed_candidate_blocks_against_a_stored_baseline(agent_lakes, tmp_path):
    out = tmp_path / "report.json"
    p = cli("gate", agent_lakes["candidate_lake"], "--baseline-lake", agent_lakes["lake"],
            "--baseline", "version=v1", "--json", out)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "decision: BLOCK (exit 1)" in p.stdout
    assert "Traceback" not in p.stderr
    report = json.loads(out.read_text())
    from otel_assay.report.json_report import schema
    jsonschema.validate(report, schema())
    assert report["decision"] == "block"
    by = {s["scenario"]: {c["name"]: c for c in s["checks"]} for s in report["scenarios"]}
    # the regressed prompt swaps lookup_order for the slower search_orders: the fingerprint sees it
    fp = by["order-status"]["fingerprint"]
    assert fp["verdict"] == "FAIL"
    assert {"tool:lookup_order", "tool:search_orders"} & {f["name"] for f in fp["stats"]["top_features"]}
    assert by["order-status"]["regression"]["verdict"] == "FAIL"


def test_too_few_trials_is_manual(agent_lakes):
    p = cli("gate", agent_lakes["lake"], "--baseline", "version=v1", "--candidate", "version=v1.9")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "decision: MANUAL (exit 2)" in p.stdout
    assert "INCONCLUSIVE" in p.stdout


def test_plain_text_output_fits_80_columns(agent_lakes):
    p = cli("gate", agent_lakes["lake"], "--baseline", "version=v1", "--candidate", "version=v1.9")
    assert "\x1b[" not in p.stdout  # not a terminal: no escape codes
    assert max(len(line) for line in p.stdout.splitlines()) <= 80


def test_verdict_command(agent_lakes):
    ok = cli("verdict", agent_lakes["lake"], "--select", "version=v1", "--threshold", "0.6")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = cli("verdict", agent_lakes["candidate_lake"], "--select", "version=v2", "--threshold", "0.95")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    missing = cli("verdict", agent_lakes["lake"], "--select", "version=v1")
    assert missing.returncode == 3 and "threshold" in missing.stderr


def test_regress_ignores_the_coverage_minimum(agent_lakes, tmp_path):
    cfg = _config(tmp_path, "delta: 0.15\nmin_coverage: 0.99\n")
    args = ("--baseline", "version=v1", "--candidate", "version=v1.1", "--config", cfg, "--json")
    gate = cli("gate", agent_lakes["lake"], *args, tmp_path / "g.json")
    regress = cli("regress", agent_lakes["lake"], *args, tmp_path / "r.json")
    g, r = (json.loads((tmp_path / f).read_text()) for f in ("g.json", "r.json"))
    assert g["coverage"]["verdict"] == "INCONCLUSIVE" and gate.returncode == 2
    assert r["coverage"]["verdict"] == "SKIPPED" and r["mode"] == "regress"
    assert regress.returncode == {"deploy": 0, "block": 1, "manual": 2}[r["decision"]]


def test_report_command_writes_and_exits_0(agent_lakes, tmp_path):
    html = tmp_path / "r.html"
    p = cli("report", agent_lakes["candidate_lake"], "--baseline-lake", agent_lakes["lake"],
            "--baseline", "version=v1", "--html", html, "-q")
    assert p.returncode == 0, p.stderr
    assert "decision: block (the gate would exit 1)" in p.stdout  # report itself exits 0
    text = html.read_text()
    assert "<script" not in text and "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert cli("report", agent_lakes["lake"]).returncode == 3  # no report asked for


def test_verdicts_go_back_into_otel(agent_lakes, tmp_path):
    import shutil

    lake = tmp_path / "lake"
    shutil.copytree(agent_lakes["candidate_lake"], lake)
    p = cli("gate", lake, "--baseline-lake", agent_lakes["lake"], "--baseline", "version=v1", "--emit-otel", "lake",
            "-q")
    assert p.returncode == 1, p.stderr
    from otel_assay.analyze.engine import Engine
    with Engine(agent_lakes["candidate_lake"]) as eng:
        n_trials = eng.rows("SELECT count(*) FROM trials")[0][0]
    with Engine(lake) as eng:
        rows = eng.rows("SELECT e.attributes['gen_ai.evaluation.name'], e.attributes['gen_ai.evaluation.score.label'] "
                        "FROM span_events e JOIN spans s USING (trace_id, span_id) "
                        "WHERE s.name = 'assay.gate' AND e.name = 'gen_ai.evaluation.result'")
        # the gate's trace is in the lake but is no trial (pass rates and coverage count trials)
        assert eng.rows("SELECT count(*) FROM trials")[0][0] == n_trials
        assert eng.rows("SELECT count(DISTINCT trace_id) FROM spans")[0][0] == n_trials + 1
    assert ("otel-assay.decision", "block") in rows
    assert ("otel-assay.fingerprint", "fail") in rows
    # the gate's own span is not a trial: the lake gates the same way again
    again = cli("gate", lake, "--baseline-lake", agent_lakes["lake"], "--baseline", "version=v1", "-q")
    assert again.returncode == 1, again.stderr
    # a collector that is not there: a warning, not "emitted", and the decision's exit code
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it once closed
    p = cli("gate", lake, "--baseline-lake", agent_lakes["lake"], "--baseline", "version=v1", "-q",
            "--emit-otel", f"http://127.0.0.1:{port}/v1/traces", env={"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2"})
    assert p.returncode == 1 and "were not emitted" in p.stderr and "emitted 7" not in p.stderr, p.stderr


def _demo_command() -> str:
    from otel_assay.cli import cli as group
    from otel_assay.cli import gate as gate_cli
    return next(name for name, cmd in group.commands.items() if cmd is gate_cli.demo)


def test_demo_runs_the_agents_and_the_gate(tmp_path):
    from .conftest import needs_langgraph
    needs_langgraph()
    out = tmp_path / "demo"
    p = cli(_demo_command(), "--dir", out, "--trials", "20")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "In CI this gate would exit 1 (block)." in p.stdout
    for f in ("report.html", "report.json", "junit.xml"):
        assert (out / f).stat().st_size > 0
    again = cli(_demo_command(), "--dir", out, "--trials", "5")  # its own directory: recreated
    assert again.returncode == 0, again.stderr
    other = tmp_path / "someone-elses"
    other.mkdir()
    (other / "keep.txt").write_text("data")
    refused = cli(_demo_command(), "--dir", other)
    assert refused.returncode == 3 and (other / "keep.txt").exists()


def test_a_reader_that_stops_early_changes_neither_the_decision_nor_the_reports(agent_lakes, tmp_path):
    """`gate ... | head`: click exited 1 on the broken pipe, which under `set -o pipefail` (GitHub
    Actions' default shell) blocked a candidate the gate deployed, and the reports after the
    terminal one were never written. A reader that exits at once (`true`) breaks the pipe
    before the gate's first line, however fast the machine."""
    import shlex
    import subprocess
    import sys

    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    cmd = " ".join(shlex.quote(str(a)) for a in (sys.executable, "-m", "otel_assay", "gate", agent_lakes["lake"],
                                                 "--baseline", "version=v1", "--candidate", "version=v1.1",
                                                 "--json", out))
    p = subprocess.run(["bash", "-o", "pipefail", "-c", f"{cmd} | true"], capture_output=True, text=True,
                       timeout=300, env=env, cwd=REPO)
    decision = json.loads(out.read_text())
    assert p.returncode == decision["exit_code"], p.stderr
    assert "Traceback" not in p.stderr and "Broken pipe" not in p.stderr, p.stderr
