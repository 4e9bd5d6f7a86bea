"""The package's layering, read from its real source files: only the command line imports
click, a model object never imports a report, and ``otel-assay --help`` imports nothing heavy."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import otel_assay

PACKAGE = Path(otel_assay.__file__).resolve().parent


def _imports(path: Path) -> set[str]:
    """The absolute module names ``path`` imports, anywhere in it (functions included)."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def _sources() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50  # the walk found the package's sources
    return files


def test_only_the_command_line_imports_click():
    cli = PACKAGE / "cli"
    assert any("click" in _imports(p) for p in cli.glob("*.py"))  # the check sees click where it is
    outside = [str(p.relative_to(PACKAGE)) for p in _sources()
               if cli not in p.parents and any(m == "click" or m.startswith("click.") for m in _imports(p))]
    assert outside == []


def test_no_library_module_imports_the_command_line():
    offenders = [str(p.relative_to(PACKAGE)) for p in _sources()
                 if PACKAGE / "cli" not in p.parents and p.name != "__main__.py"
                 and any(m == "otel_assay.cli" or m.startswith("otel_assay.cli.") for m in _imports(p))]
    assert offenders == []


def test_the_gate_model_imports_no_report():
    for name in ("result.py", "config.py", "family.py"):
        imported = _imports(PACKAGE / "gate" / name)
        assert "otel_assay.stats" in imported or "otel_assay.errors" in imported  # imports were read
        assert not [m for m in imported if m.startswith("otel_assay.report")], name


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
