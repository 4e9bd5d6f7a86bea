"""`otel-assay run` on the real LangGraph example agent (scripted offline model), in the
capture-main environment where LangGraph is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = os.environ.get("OTEL_ASSAY_LANGGRAPH_PYTHON", "/work/venvs/capture-main/bin/python")
RUN = ("import click; from otel_assay.cli import cli; from otel_assay.cli.live import register; "
       "register(cli); cli()")

pytestmark = pytest.mark.skipif(not os.path.exists(PY), reason=f"no LangGraph environment at {PY}")


def run(*args):
    return subprocess.run([PY, "-c", RUN, "run", "examples/scenarios/langgraph_support.yaml", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_langgraph_agent_run_resume_and_gate(tmp_path):
    lake = str(tmp_path / "lake")
    r = run("--version", "v1", "--dir", lake, "-q", "--json", str(tmp_path / "v1.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    v1 = json.loads((tmp_path / "v1.json").read_text())
    assert all(s["decision"] == "PASS" and s["stop_reason"] == "boundary" for s in v1["scenarios"])
    assert all(s["tokens"] > 0 for s in v1["scenarios"])  # LangGraph's chat spans reached the collector
    # rerun of the same version: resumes from the lake, runs nothing
    r = run("--version", "v1", "--dir", lake, "-q", "--json", str(tmp_path / "again.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads((tmp_path / "again.json").read_text())
    assert all(s["ran"] == 0 and s["resumed"] >= s["n"] for s in again["scenarios"])
    # the regressed v2 fails and the gate against v1 blocks
    r = run("--version", "v2", "--dir", lake, "-q", "--baseline", "version=v1", "--method", "fixed")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "decision: block (exit 1)" in r.stdout  # the gate's word for it, as `otel-assay gate` prints
    # the lake holds LangGraph's spans under the trials
    sys.path.insert(0, str(ROOT))
    from otel_assay.analyze.engine import Engine
    with Engine(lake) as eng:
        n_tool = eng.con.execute("SELECT count(*) FROM steps WHERE step_kind = 'tool'").fetchone()[0]
        versions = dict(eng.con.execute("SELECT version, count(*) FROM trials GROUP BY 1").fetchall())
    assert n_tool > 0 and set(versions) == {"v1", "v2"}
