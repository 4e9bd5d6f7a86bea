"""One agent, several instrumentations: the gate compares behaviour, not the instrumentation.

The same scripted LangGraph agent (tests/gate/aa_agent.py: per seed, 1-3 tool calls, random
tokens and answer length) is recorded by each instrumentation in turn with the real
instrumentation packages: OpenInference, OpenLLMetry (Traceloop), LangSmith's OTel mode and
otel-assay. Each nests the run in its own container steps (6, 5 and 4 steps for the same
single-call run), so a fingerprint of all steps told them apart.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from otel_assay.analyze.engine import Engine
from otel_assay.analyze.fingerprint import fingerprint_matrix
from otel_assay.gate.fingerprint import STRUCTURAL_FEATURES

from ..analyze.lakes import write_otlp_json

RECORDER = Path(__file__).with_name("aa_agent.py")
# instrumentation -> the modules it needs
INSTRUMENTATIONS = {
    "openinference": ["openinference.instrumentation.langchain"],
    "openllmetry": ["opentelemetry.instrumentation.langchain"],
    "langsmith": ["langsmith"],
    "otel_assay": [],
}
LANGSMITH_ENV = {"LANGSMITH_TRACING": "true", "LANGSMITH_TRACING_MODE": "otel",
                 "LANGSMITH_API_KEY": "offline", "LANGSMITH_ENDPOINT": "http://127.0.0.1:9"}
SEEDS = 40


def record(out: Path, instrumentation: str, agent: str, first: int, n: int) -> Path:
    """A lake of ``n`` trials (seeds first..first+n-1) of ``agent`` recorded by ``instrumentation``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LANGSMITH_", "LANGCHAIN_"))}
    env.update(LANGSMITH_ENV if instrumentation == "langsmith" else {})
    env["OTEL_ASSAY_DIR"] = str(out / "unused-lake")  # otel-assay's own lake; the spans are read from the JSON
    doc = out / f"{instrumentation}-{agent}-{first}.json"
    subprocess.run([sys.executable, str(RECORDER), instrumentation, str(doc), agent, str(first), str(n)],
                   check=True, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    return write_otlp_json(out / doc.stem, doc)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """{instrumentation: lake of seeds 0..SEEDS-1 of agent v1}."""
    if importlib.util.find_spec("langgraph") is None:
        pytest.skip("needs langgraph: pip install -e '.[dev,langgraph,dialects]'")
    for name, modules in INSTRUMENTATIONS.items():
        if any(importlib.util.find_spec(m.split(".")[0]) is None or importlib.util.find_spec(m) is None
               for m in modules):
            pytest.skip(f"{name} is not installed: pip install -e '.[dev,langgraph,dialects]'")
    root = tmp_path_factory.mktemp("conventions")
    return {name: record(root, name, "v1", 0, SEEDS) for name in INSTRUMENTATIONS}


def _fingerprints(lake: Path) -> list[dict]:
    """The gate's features per trial in seed order (trials start one after another)."""
    with Engine(lake) as eng:
        table = fingerprint_matrix(eng, None, ["add", "mul"])
        order = {r[0]: r[1] for r in eng.rows("SELECT trace_id, start_time_unix_nano FROM trials")}
    rows = sorted(table.to_pylist(), key=lambda r: order[r["trace_id"]])
    drop = {"trace_id", "scenario", "version", "run_id", "latency_s", *STRUCTURAL_FEATURES}
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def test_the_gates_features_of_one_run_agree_across_instrumentations(recordings):
    prints = {name: _fingerprints(lake) for name, lake in recordings.items()}
    assert all(len(p) == SEEDS for p in prints.values()), {k: len(p) for k, p in prints.items()}
    reference = prints["otel_assay"]
    # the runs differ from seed to seed (else agreeing would prove little)
    assert len({(r["n_steps"], r["tool:add"], r["total_tokens"]) for r in reference}) > SEEDS // 2
    for name, p in prints.items():
        for seed, (row, ref) in enumerate(zip(p, reference)):
            assert row == pytest.approx(ref), (name, seed)
