"""``otel-assay demo``: the example LangGraph agent, offline, then the gate.

Runs ``examples/langgraph_agent.py`` (a real LangGraph graph with a scripted chat model,
instrumented by ``import otel_assay.auto``) for a baseline version v1 and a regressed
candidate v2, in two processes at once, each writing its traces into ``DIR/lake`` through
otel-assay's capture layer. Then the gate compares them and writes the HTML, JSON and
JUnit reports into DIR.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import DataError, UsageError
from .gate import GateConfig, run_gate
from .report.html import write_html
from .report.json_report import write_json
from .report.junit import write_junit

MARKER = ".otel-assay-demo"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "langgraph_agent.py"


@dataclass
class DemoResult:
    lake: Path
    gate: object  # otel_assay.gate.GateResult
    html: Path
    json: Path
    junit: Path
    seconds: float


def _prepare(out: Path) -> None:
    """Recreate DIR, but only if it is empty or an earlier demo's (never someone's data)."""
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"--dir {out} is a file; pick a directory for the demo")
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise UsageError(f"--dir {out} is not empty and was not made by the demo; pick a new directory")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("written by `otel-assay demo`; the demo deletes and recreates this directory\n")


def run_agents(lake: str | os.PathLike, trials: dict[str, int], seed: int, timeout: float = 600) -> None:
    """Run the LangGraph example for each version (``trials``: version -> trials per
    scenario), one process per version, all at once, into ``lake``."""
    if not EXAMPLE.is_file():
        raise UsageError(f"the demo runs {EXAMPLE}, which is missing: run it from a source checkout of otel-assay")
    if importlib.util.find_spec("langgraph") is None:
        raise UsageError("the demo runs a LangGraph agent: pip install 'otel-assay[langgraph]'")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_ASSAY_DIR=str(lake), PYTHONUNBUFFERED="1")
    versions = list(trials)
    procs = [subprocess.Popen([sys.executable, str(EXAMPLE), "--version", v, "--trials", str(trials[v]),
                               "--dir", str(lake), "--seed", str(seed)],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for v in versions]
    failed = []
    for v, p in zip(versions, procs):
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            err = f"timed out after {timeout:.0f} s\n{err}"
        if p.returncode != 0:
            failed.append(f"version {v}: exit {p.returncode}\n{err[-2000:]}")
    if failed:
        raise DataError("the example agent failed:\n" + "\n".join(failed))


def run_demo(out_dir: str | os.PathLike, *, trials: int = 60, seed: int = 1,
             log: Callable[[str], None] = lambda m: None) -> DemoResult:
    t0 = time.monotonic()
    out = Path(out_dir)
    _prepare(out)
    lake = out / "lake"
    log(f"demo: running the LangGraph example agent, {trials} trials per scenario, versions v1 (baseline) "
        f"and v2 (regressed candidate) -> {lake}/")
    run_agents(lake, {"v1": trials, "v2": trials}, seed)
    log(f"demo: agents done in {time.monotonic() - t0:.1f} s; running the gate")
    result = run_gate(lake, GateConfig(), baseline="version=v1", candidate="version=v2")
    paths = out / "report.html", out / "report.json", out / "junit.xml"
    write_html(result, paths[0])
    write_json(result, paths[1])
    write_junit(result, paths[2])
    return DemoResult(lake, result, *paths, time.monotonic() - t0)
