"""One agent, several instrumentations: the gate compares behaviour, not the instrumentation.

The same scripted LangGraph agent (tests/gate/aa_agent.py: per seed, 1-3 tool calls, random
tokens and answer length) is recorded by each instrumentation in turn with the real
instrumentation packages: OpenInference, OpenLLMetry (Traceloop), LangSmith's OTel mode and
otel-assay. Each nests the run in its own container steps (6, 5 and 4 steps for the same
single-call run), so a fingerprint of all steps told them apart.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from otel_assay.analyze.engine import Engine
from otel_assay.analyze.fingerprint import fingerprint_matrix
from otel_assay.gate import run_gate
from otel_assay.gate.fingerprint import STRUCTURAL_FEATURES

from ..analyze.lakes import write_otlp_json
from ..stats.bands import max_events
from .conftest import cli

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
PER_ARM = 20
# every pair of instrumentations gets its own block of seeds (2 x PER_ARM runs), so that
# their gate runs are independent. The fingerprint test is symmetric in its two arms, so one
# order per pair suffices; which one records the baseline alternates, so that every
# instrumentation is seen in both roles
PAIRS = [(a, b) if k % 2 == 0 else (b, a)
         for k, (a, b) in enumerate(itertools.combinations(INSTRUMENTATIONS, 2))]
SEEDS = len(PAIRS) * 2 * PER_ARM


def record(out: Path, instrumentation: str, agent: str, first: int, n: int) -> Path:
    """The OTLP/JSON document of ``n`` trials (seeds first..first+n-1) of ``agent`` recorded by ``instrumentation``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LANGSMITH_", "LANGCHAIN_"))}
    env.update(LANGSMITH_ENV if instrumentation == "langsmith" else {})
    env["OTEL_ASSAY_DIR"] = str(out / "unused-lake")  # otel-assay's own lake; the spans are read from the JSON
    doc = out / f"{instrumentation}-{agent}-{first}.json"
    subprocess.run([sys.executable, str(RECORDER), instrumentation, str(doc), agent, str(first), str(n)],
                   check=True, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    return doc


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """{instrumentation: OTLP/JSON document of seeds 0..SEEDS-1 of agent v1}."""
    if importlib.util.find_spec("langgraph") is None:
        pytest.skip("needs langgraph: pip install -e '.[dev,langgraph,dialects]'")
    for name, modules in INSTRUMENTATIONS.items():
        if any(importlib.util.find_spec(m.split(".")[0]) is None or importlib.util.find_spec(m) is None
               for m in modules):
            pytest.skip(f"{name} is not installed: pip install -e '.[dev,langgraph,dialects]'")
    root = tmp_path_factory.mktemp("conventions")
    return {name: record(root, name, "v1", 0, SEEDS) for name in INSTRUMENTATIONS}


def _fingerprints(lake: Path) -> list[tuple]:
    """The gate's features of each trial, as sorted tuples (the runs as a multiset: the order
    the instrumentations export them in is theirs)."""
    with Engine(lake) as eng:
        table = fingerprint_matrix(eng, None, ["add", "mul"])
    drop = {"trace_id", "scenario", "version", "run_id", "latency_s", *STRUCTURAL_FEATURES}
    names = [n for n in table.column_names if n not in drop]
    return sorted(tuple(-1.0 if r[n] is None else round(r[n], 9) for n in names) for r in table.to_pylist()), names


def test_the_gates_features_of_one_run_agree_across_instrumentations(recordings, tmp_path):
    prints = {name: _fingerprints(write_otlp_json(tmp_path / name, doc)) for name, doc in recordings.items()}
    reference, names = prints["otel_assay"]
    assert "n_steps" in names and "tool:add" in names and "total_tokens" in names and "frac_agent" not in names
    assert len(reference) == SEEDS
    # the runs differ from seed to seed (else agreeing would prove little)
    assert len(set(reference)) > SEEDS // 2
    for name, (rows, _) in prints.items():
        assert rows == reference, name


def test_every_report_names_the_instrumentations_of_each_arm(recordings, tmp_path):
    # an OpenInference-recorded stored baseline against an otel-assay-recorded candidate
    # of the same agent (seeds 0-19 against 20-39): it was blocked on n_steps 6→4
    base = split(recordings["openinference"], tmp_path / "b", 0)
    cand = split(recordings["otel_assay"], tmp_path / "c", PER_ARM)
    p = cli("gate", cand, "--baseline-lake", base, "--json", tmp_path / "r.json", "--junit", tmp_path / "r.xml",
            "--html", tmp_path / "r.html")
    # no outcomes recorded: the fingerprint is the check that decides, and it deploys
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    (fp,) = [c for s in doc["scenarios"] for c in s["checks"] if c["name"] == "fingerprint"]
    assert fp["verdict"] == "PASS", fp
    assert (doc["baseline"]["conventions"], doc["candidate"]["conventions"]) == (["openinference"], ["otel_assay"])
    said = "different instrumentations: baseline openinference, candidate otel_assay"
    assert any(said in n for n in doc["notes"])
    text = " ".join(p.stdout.split())
    assert said in text and "recorded by otel_assay" in text and "recorded by openinference" in text
    assert said in " ".join((tmp_path / "r.html").read_text().split())
    props = {e.get("name"): e.get("value") for e in ET.parse(tmp_path / "r.xml").iter("property")}
    assert (props["baseline.conventions"], props["candidate.conventions"]) == ("openinference", "otel_assay")


def test_one_instrumentation_on_both_arms_is_not_remarked(recordings, tmp_path):
    base, cand = split(recordings["langsmith"], tmp_path / "b", 0), split(recordings["langsmith"], tmp_path / "c", PER_ARM)
    p = cli("gate", cand, "--baseline-lake", base, "--json", tmp_path / "r.json")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["baseline"]["conventions"] == doc["candidate"]["conventions"] == ["langsmith"]
    assert not any("instrumentations" in n for n in doc["notes"]) and "recorded by" not in p.stdout


def test_every_pair_of_instrumentations_gates_an_unchanged_agent_as_unchanged(recordings, tmp_path):
    # the cross-instrumentation A/A test: baseline recorded by a, candidate by b, the same
    # agent on other seeds. Only the fingerprint can block here (no outcomes are recorded),
    # at alpha = 0.05 each: of 6 independent runs a correct gate blocks more than
    # max_events(6, .05) with probability < 1e-4. Counting all steps, 10 of the 12 ordered
    # pairs blocked (all but LangSmith against otel-assay and back, which nest a run alike)
    blocked = []
    for k, (a, b) in enumerate(PAIRS):
        base = split(recordings[a], tmp_path / f"{k}-b", 2 * PER_ARM * k)
        cand = split(recordings[b], tmp_path / f"{k}-c", 2 * PER_ARM * k + PER_ARM)
        r = run_gate(cand, baseline_lake=base)
        (fp,) = [c for s in r.scenarios for c in s.checks if c.name == "fingerprint"]
        assert fp.verdict in ("PASS", "FAIL") and fp.stats["n_baseline"] == fp.stats["n_candidate"] == PER_ARM
        assert (r.baseline["conventions"], r.candidate["conventions"]) == ([a], [b])
        assert any(f"baseline {a}, candidate {b}" in n for n in r.notes), r.notes
        blocked += [(a, b, fp.reason)] if r.decision == "block" else []
    assert len(blocked) <= max_events(len(PAIRS), 0.05), blocked


def test_a_real_change_recorded_by_another_instrumentation_still_blocks(recordings, tmp_path):
    # the agent changed (2-3 tool calls instead of 1-3, mul preferred over add): recorded by
    # OpenInference against an otel-assay baseline of the old agent, the fingerprint sees it.
    # 60 trials per arm, past the 50 pairs of the check's T² look: at 20 the test that stays
    # valid however often one gates has not seen this shift yet (e = 11.6 of the 40 it needs)
    n = 60
    changed = record(tmp_path, "openinference", "v2", 0, n)
    r = run_gate(split(changed, tmp_path / "c", 0, n),
                 baseline_lake=split(recordings["otel_assay"], tmp_path / "b", 0, n))
    (fp,) = [c for s in r.scenarios for c in s.checks if c.name == "fingerprint"]
    assert (r.decision, fp.verdict) == ("block", "FAIL"), fp.reason
    assert {f["name"] for f in fp.stats["top_features"][:3]} & {"tool:add", "tool:mul", "n_steps", "frac_tool"}


def split(doc: Path, out: Path, first: int, n: int = PER_ARM) -> Path:
    """A lake of runs first..first+n-1 of the recorded OTLP/JSON ``doc`` (in the order they
    started: seed order), each marked as a trial of
    scenario "calc" as `otel_assay.trial` marks the spans of a trial (assay.scenario on every
    span), whatever instrumentation recorded them."""
    data = json.loads(doc.read_text())
    spans = [sp for rs in data["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
    starts: dict[str, int] = {}
    for sp in spans:
        starts[sp["traceId"]] = min(starts.get(sp["traceId"], 1 << 63), int(sp["startTimeUnixNano"]))
    order = sorted(starts, key=starts.get)
    keep = set(order[first:first + n])
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            ss["spans"] = [sp for sp in ss["spans"] if sp["traceId"] in keep]
            for sp in ss["spans"]:
                sp["attributes"].append({"key": "assay.scenario", "value": {"stringValue": "calc"}})
    part = out.with_suffix(".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    part.write_text(json.dumps(data))
    return write_otlp_json(out, part)
