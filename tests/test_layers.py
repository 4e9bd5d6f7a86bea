"""The package's import graph: no cycles, and the layer contracts in .importlinter hold and
catch a broken layer (an upward import planted in a copy of the package)."""

from __future__ import annotations

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
