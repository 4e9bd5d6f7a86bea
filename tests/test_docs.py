"""The documentation stays true to the code and to itself.

- docs/cli.md is what scripts/cli-reference generates from the CLI's --help now, so a
  changed option or help text without a regenerated reference fails here.
- Every relative link in README.md and docs/*.md reaches a file that exists (and, for a
  link into a markdown page, a heading that exists), so moving a page breaks a test, not a
  reader's click.
- README.md stays a front page: at most 150 lines, and the first thing after its
  introduction is the two commands a newcomer runs, byte for byte as CI and the fresh
  machine test use them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

DEMO_COMMAND = ("python3.11 -m venv .venv && .venv/bin/pip install -e '.[langgraph]' && "
                ".venv/bin/otel-assay demo --dir demo-out")
TEST_COMMAND = "bash scripts/test"

# [text](target) outside code; images too. Reference-style links are not used in these pages.
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~)")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a link-like text in code is code, not a link)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def anchors(path: Path) -> set[str]:
    """The heading anchors GitHub renders for a markdown page: lower case, punctuation
    dropped, spaces to hyphens, a repeated heading numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    links = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            links.append(target)
    return links


def test_docs_folder_has_the_pages():
    names = {p.name for p in DOCS.glob("*.md")}
    expected = {"capture.md", "lake.md", "collector.md", "analysis.md", "gate.md", "oracles.md",
                "live.md", "cli.md", "testing.md"}
    assert expected <= names, f"missing: {sorted(expected - names)}"


def test_every_relative_link_points_to_an_existing_file_and_heading():
    checked = 0
    broken = []
    for page in pages():
        for target in relative_links(page):
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            checked += 1
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)
    # the README links every page, and the pages link each other: a parser that found no
    # links would pass the check above on nothing
    assert checked >= 30


def test_link_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nSee [there](missing.md) and [here](#title) and [gone](#nope).\n"
                    "```\n[in code](also-missing.md)\n```\n", encoding="utf-8")
    assert relative_links(page) == ["missing.md", "#title", "#nope"]
    assert anchors(page) == {"title"}


def test_anchor_slugs_follow_github():
    page = DOCS / "cli.md"
    assert {"otel-assay-gate", "otel-assay-pass-rates", "cli-reference"} <= anchors(page)


def test_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail to docs/"


def test_readme_starts_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0].startswith("# "), "README.md starts with its title"
    first_fence = next(i for i, line in enumerate(lines) if line.startswith("```"))
    intro = lines[1:first_fence]
    # only the introduction comes before the commands: no section heading, no other code
    assert not any(line.startswith("#") for line in intro), "a section comes before the two commands"
    end = next(i for i in range(first_fence + 1, len(lines)) if lines[i].startswith("```"))
    block = lines[first_fence + 1:end]
    commands = [line for line in block if line and not line.startswith("#")]
    assert commands == [DEMO_COMMAND, TEST_COMMAND]


@pytest.fixture(scope="module")
def generated_cli_reference() -> str:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli-reference"), "--output", "-"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_reference_is_current(generated_cli_reference):
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == generated_cli_reference, (
        "docs/cli.md differs from the CLI's --help: run `.venv/bin/python scripts/cli-reference`")


def test_cli_reference_covers_every_command(generated_cli_reference):
    listed = subprocess.run([str(Path(sys.executable).parent / "otel-assay"), "--help"],
                            capture_output=True, text=True, check=True).stdout
    section = listed.split("Commands:", 1)[1]
    names = re.findall(r"^  (\S+)", section, flags=re.M)
    assert len(names) >= 20
    for name in names:
        assert f"\n## otel-assay {name}\n" in generated_cli_reference
        assert f"Usage: otel-assay {name} " in generated_cli_reference
