"""Lakes for the gate tests, written by the real LangGraph example agent (scripted model,
offline) through otel-assay's capture layer, once per test session."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BASELINE_TRIALS = 100
# Versions other than v2 behave like v1 (examples/_common.py), each with its own random draws:
# these are unchanged candidates.
UNCHANGED = ("v1.1", "v1.2", "v1.3")
REGRESSED_TRIALS = 40
FEW_TRIALS = 4


def cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real command line in a fresh interpreter (exit codes as a CI job sees them);
    ``env`` adds variables to an environment without the caller's OTEL_*."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}, **(env or {})}
    env["COLUMNS"] = "80"
    return subprocess.run([sys.executable, "-m", "otel_assay", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL, cwd=REPO)


def needs_langgraph():
    if importlib.util.find_spec("langgraph") is None:
        pytest.skip("the gate's end-to-end tests run the LangGraph example agent: "
                    "pip install -e '.[dev,langgraph]'")


@pytest.fixture(scope="session")
def agent_lakes(tmp_path_factory):
    """{"lake": baseline v1 + unchanged candidates + a candidate with few trials,
    "candidate_lake": the regressed v2 alone (for --baseline-lake)}."""
    needs_langgraph()
    from otel_assay.demo import run_agents

    root = tmp_path_factory.mktemp("agent-lakes")
    lake, cand = root / "lake", root / "candidate-lake"
    versions = {"v1": BASELINE_TRIALS, **{v: BASELINE_TRIALS for v in UNCHANGED}, "v1.9": FEW_TRIALS}
    run_agents(lake, versions, seed=1)
    run_agents(cand, {"v2": REGRESSED_TRIALS}, seed=1)
    return {"lake": lake, "candidate_lake": cand}
