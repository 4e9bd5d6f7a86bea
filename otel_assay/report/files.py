"""The report files a run writes (--json, --junit, --html): checked before the run, cleared of
an earlier run's, written after it.

CI steps upload whatever report file is at the path they name. A run that stops with an
error (exit 3 or 4) must therefore leave no earlier run's report there to pass for its own,
and a report path that cannot work (no such directory, two reports on one file) is refused
before the analysis runs, not after it.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError


def check_output_paths(*, config: str | None = None, **paths) -> None:
    """Refuse report paths in a directory that does not exist before the analysis runs, not
    after (the command line already refuses a path that is a directory); and two reports on
    one file (the second would replace the first) or a report on the config."""
    seen: dict[Path, str] = {Path(config).resolve(): "--config"} if config else {}
    for flag, path in paths.items():
        if path is not None and str(path).strip() in ("", "-"):
            raise UsageError(f"--{flag} {str(path)!r}: give a file path (the terminal report already goes to stdout)")
        if path and not Path(path).parent.is_dir():
            parent = Path(path).parent
            if parent.exists():  # a file: "create it first" would send the user looking for nothing
                raise UsageError(f"--{flag} {path}: {parent} is a file, not a directory; give a path in a directory")
            raise UsageError(f"--{flag} {path}: directory {parent} does not exist; create it first")
        if path:
            other = seen.setdefault(Path(path).resolve(), f"--{flag}")
            if other != f"--{flag}":
                raise UsageError(f"--{flag} {path} is also the file of {other}; give each report its own file")


def remove_stale_reports(*paths, config: str | None = None) -> None:
    """Delete reports an earlier run left at these paths. Only regular files go (never a
    device such as /dev/stdout, nor what a symlink points to), and never the ``config`` (a
    report path may name it by mistake: check_output_paths refuses that) nor a file called
    "-" (which --json - does not mean)."""
    keep = Path(config).resolve() if config else None
    for path in paths:
        if path and str(path).strip() not in ("", "-"):
            p = Path(path)
            if p.is_file() and not p.is_symlink() and p.resolve() != keep:
                p.unlink(missing_ok=True)


def write_reports(result, *, json_path=None, junit_path=None, html_path=None) -> None:
    """Write the gate's reports that were asked for. If one cannot be written, the ones
    written before it go too (they would pass for the results of a run that exits 3, and
    their exit_code says otherwise) and a UsageError says why: a report CI expects must not
    go missing unnoticed."""
    # each writer is imported when its report is asked for: every command loads this module
    # at start-up (`--help` too), and the three writers with xml.etree and socket took 0.012 s
    try:
        if json_path:
            from .json_report import write_json

            write_json(result, json_path)
        if junit_path:
            from .junit import write_junit

            write_junit(result, junit_path)
        if html_path:
            from .html import write_html

            write_html(result, html_path)
    except OSError as e:
        remove_stale_reports(json_path, junit_path, html_path)
        raise UsageError(f"cannot write the report: {e}; exit 3 instead of the decision's "
                         f"{result.exit_code}: a report CI expects must not go missing unnoticed") from None
