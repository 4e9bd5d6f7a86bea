"""Check that an environment installed with `uv pip install --resolution lowest-direct` holds
exactly the lowest versions pyproject.toml declares for the given extras.

A declared floor that the resolver cannot reach (another requirement pulls the package
higher) is a floor nobody tests: the check names it and says which version to declare.
Exit 0 when every floor is installed as declared, 1 otherwise.

    python scripts/check_lowest.py langgraph smolagents openai-agents
    python scripts/check_lowest.py --extras-only crewai   # that extra's own floors only
"""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

import re

# pyproject's requirements are all `name>=floor` (with extras or markers after): read without
# `packaging`, which a lowest-versions environment need not have
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^]]*\])?\s*>=\s*([0-9][0-9a-zA-Z.]*)")


def _norm(version: str) -> tuple:
    """A release version as comparable parts (1.30 == 1.30.0)."""
    parts = [int(p) if p.isdigit() else p for p in re.split(r"[.]", version)]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def floors(extras: list[str]) -> dict[str, str]:
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    out = {}
    for text in reqs:
        m = _REQ.match(text)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def main(extras: list[str]) -> int:
    bad = []
    if extras[:1] == ["--extras-only"]:
        # a framework that pulls the core floors up (CrewAI) is tested at its own floor in an
        # environment of its own: only the floors its extra declares are its to check
        core = floors([])
        declared = {k: v for k, v in floors(extras[1:]).items() if k not in core}
    else:
        declared = floors(extras)
    for name, floor in sorted(declared.items()):
        installed = metadata.version(name)
        if _norm(installed) != _norm(floor):
            bad.append(f"{name}: pyproject declares >={floor} but the lowest that resolves is {installed}; "
                       f"declare >={installed} (or find what pulls it up)")
    for line in bad:
        print(line)
    print(f"lowest versions: {len(declared) - len(bad)} of {len(declared)} floors installed as declared")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
