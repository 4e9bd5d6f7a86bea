"""The package's import graph: no cycles, the layer contracts in .importlinter hold (only
the CLI imports click, the readers never import capture or collect, stats imports nothing of
ours, arrows point down) and catch a broken layer (an upward import planted in a copy of the
package), and `otel-assay --help` loads nothing heavy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).parent.parent
LINT = Path(sys.executable).parent / "lint-imports"


def _cycles(graph) -> list[tuple[str, str]]:
    """Each direct import a -> b for which b also reaches a: an edge of some cycle."""
    return [(a, b) for a in sorted(graph.modules) for b in sorted(graph.find_modules_directly_imported_by(a))
            if graph.chain_exists(importer=b, imported=a)]


def test_no_import_cycles():
    graph = grimp.build_graph("otel_assay")
    assert len(graph.modules) > 50, "the graph read too few modules to mean anything"
    assert _cycles(graph) == []


def _lint(package_parent: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run([str(LINT), "--config", str(ROOT / ".importlinter"), "--no-cache"], cwd=package_parent,
                          env=env, capture_output=True, text=True, timeout=300)


def test_layer_contracts_hold():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_an_upward_import_breaks_a_contract(tmp_path):
    shutil.copytree(ROOT / "otel_assay", tmp_path / "otel_assay",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "queries"))
    stats = tmp_path / "otel_assay" / "stats" / "multiple.py"
    stats.write_text(stats.read_text() + "\nfrom otel_assay.report import output  # planted\n")
    r = _lint(tmp_path)
    assert r.returncode == 1, r.stdout[-3000:]
    assert "otel_assay.stats.multiple -> otel_assay.report.output" in r.stdout


def test_help_imports_nothing_heavy():
    # `otel-assay --help` and a usage error must answer at once: the heavy libraries load
    # only when a command runs
    code = ("import sys\nfrom otel_assay.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "import json\nprint(json.dumps(sorted(m for m in sys.modules)))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    loaded = set(json.loads(p.stdout.splitlines()[-1]))
    assert "click" in loaded and "otel_assay.cli" in loaded
    heavy = {"duckdb", "pyarrow", "numpy", "scipy", "rich", "yaml", "opentelemetry", "langgraph", "grpc"}
    assert sorted(heavy & {m.split(".")[0] for m in loaded}) == []


def test_the_shown_state_lambda_is_the_analysis_default():
    from otel_assay.cli.analyze import STATE_LAMBDA_DEFAULT
    from otel_assay.stats.coverage import DEFAULT_STATE_LAMBDA

    assert STATE_LAMBDA_DEFAULT == DEFAULT_STATE_LAMBDA
