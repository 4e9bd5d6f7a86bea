"""Writing query results as a table, CSV or JSON (used by ``sql`` and the analysis commands)."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import sys
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TextIO

from ..text import printable

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = ("table", "csv", "json")


def feature_shift(f: dict[str, Any], unit: str = "") -> str:
    """How far a fingerprint feature moved: in standard deviations, or, where there is no
    spread to measure against (``smd`` null: a feature constant within an arm), from its
    baseline mean to its candidate mean, which says the direction an infinity would not.
    A feature constant in the baseline alone is shown the same way, saying so: its SDs are
    the candidate's spread only (a baseline of 6 steps every time against 4 or 5 read as
    "-207 SD", a number that says nothing about how far the baseline is)."""
    b, c = f.get("baseline_mean"), f.get("candidate_mean")
    means = (isinstance(b, (int, float)) and isinstance(c, (int, float)) and math.isfinite(b)
             and math.isfinite(c))
    if f.get("smd") is not None:
        if means and f.get("baseline_sd") == 0 and f.get("candidate_sd"):
            return f"{b:.3g}→{c:.3g}, constant in the baseline"
        return format(f["smd"], "+.2f") + unit
    if means:
        return f"{b:.3g}→{c:.3g}"
    return "±inf"


def family_text(result) -> str:
    """The gate's multiple-testing family in words, for the report headers: the correction runs
    once over the FAIL tests of every gating check in every scenario."""
    fam = getattr(result, "family", None)
    method = result.config.correction
    if not fam:
        return f"correction={method}"
    parts = ", ".join(f"{n} {name}" for name, n in fam["tests"].items())
    tests = "test" if fam["size"] == 1 else "tests"
    return f"correction={method} over one family of {fam['size']} FAIL {tests}" + (f" ({parts})" if parts else "")


def _cell(value: Any) -> Any:
    """A value as plain JSON data: bytes become hex, NaN and ±infinity become null (JSON
    has no spelling for them: Python's Infinity is not JSON, and parsers reject it), and
    DECIMAL and HUGEINT (DuckDB's type of sum() over integers, which Arrow carries as a
    decimal) become numbers rather than strings."""
    if isinstance(value, list):
        return [_cell(v) for v in value]
    if isinstance(value, dict):
        return {k: _cell(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _text(value: Any, exact: bool = False) -> str:
    """A value as one cell of text; ``exact`` (CSV) keeps every digit of a float, which the
    terminal table rounds to 6 significant digits."""
    if isinstance(value, float):
        if value != value:  # NaN
            return ""
        return repr(value) if exact else f"{value:.6g}"
    if isinstance(value, bool):  # as the lake spells booleans (stringify), not Python's True
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return str(value)
    value = _cell(value)
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return str(value)


def _unique_names(names: list[str]) -> list[str]:
    """``names`` with repeats renamed the way DuckDB names them in a subquery (a, a_1, a_2):
    a JSON object holds each key once."""
    taken: set[str] = set()
    out = []
    for name in names:
        unique, i = name, 0
        while unique in taken:
            i += 1
            unique = f"{name}_{i}"
        taken.add(unique)
        out.append(unique)
    return out


@contextlib.contextmanager
def stdout_reader_may_leave():
    """Write to stdout inside this block; a reader that stops early (``... | head``) ends the
    block quietly and later writes to stdout go nowhere. Click would exit 1 on the broken pipe,
    which fails a script under ``set -o pipefail`` (GitHub Actions' default shell) and reads as
    "block" to a CI gate. SIGPIPE stays ignored (Python's default): set back to SIG_DFL it would
    kill the collector on a client's closed socket instead of raising EPIPE there."""
    try:
        yield
        sys.stdout.flush()  # inside: a short output first meets the closed pipe here, not at exit
    except BrokenPipeError:
        # the unwritten rest stays buffered: the flush at exit must not fail again ("Exception ignored")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except SystemExit as e:
        # a rich Console answers a broken pipe with exit 1, having sent stdout to devnull itself
        if not isinstance(e.__context__, BrokenPipeError):
            raise


def write_table(table: pa.Table, fmt: str = "table", out: TextIO | None = None, *, max_width: int = 60) -> None:
    """Write ``table`` to ``out`` (stdout by default, whose reader may stop early) as
    ``table``, ``csv`` or ``json``.

    ``table`` uses rich on a terminal and plain aligned text otherwise, so piping the
    output into a file or a CI log gives readable text without box-drawing escapes.
    """
    if out is None:
        with stdout_reader_may_leave():
            _write_table(table, fmt, sys.stdout, max_width)
        return
    _write_table(table, fmt, out, max_width)


def _write_table(table: pa.Table, fmt: str, out: TextIO, max_width: int) -> None:
    # imported here (pyarrow and, below, rich): the command line reads FORMATS from this
    # module at start-up, and they would add 0.4 s to every `otel-assay --help`
    import pyarrow as pa

    names = table.column_names
    columns = []
    for col in table.columns:
        values = col.to_pylist()
        if pa.types.is_map(col.type):  # Arrow gives a MAP as a list of (key, value) pairs
            values = [dict(v) if v is not None else None for v in values]
        columns.append(values)
    # rows by position, not by name: a query may name two columns alike (SELECT * over a
    # join: steps and trials both have input_tokens), and keyed by name the last one's
    # values showed under both
    rows = list(zip(*columns)) if columns else []
    if fmt == "json":
        keys = _unique_names(names)
        json.dump([{k: _cell(v) for k, v in zip(keys, r)} for r in rows], out, ensure_ascii=False, default=str)
        out.write("\n")
        return
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(names)
        for r in rows:
            w.writerow([_text(v, exact=True) for v in r])
        return
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    cells = [[printable(_text(v)) for v in r] for r in rows]
    # column names carry data too: the fingerprint's `tool:<name>` columns are named after
    # the lake's tool names, and a user's SQL names its own columns
    names = [printable(n) for n in names]
    if out.isatty():
        from rich.console import Console
        from rich.measure import Measurement
        from rich.table import Table

        t = Table(*names, show_lines=False)
        for c in cells:
            t.add_row(*c)
        # values are data: "[/x]" or ":smile:" in a tool name is printed as it is
        console = Console(file=out, markup=False, emoji=False, highlight=False)
        # a table wider than the terminal is written as plain text below, whole: rich would
        # cut every cell to fit (a duration 43142135 read 43142…, trace ids could not be copied)
        if Measurement.get(console, console.options.update_width(1 << 20), t).maximum <= console.width:
            console.print(t)
            return

    from rich.cells import cell_len, set_cell_size

    # widths in terminal cells, not characters: a CJK character (or an emoji) takes two, and
    # counting it as one pushed every later column of its row out of line
    def clip(s: str) -> str:
        return s if cell_len(s) <= max_width else set_cell_size(s, max_width - 1) + "…"

    def pad(s: str, w: int) -> str:
        return s + " " * (w - cell_len(s))

    cells = [[clip(c) for c in row] for row in cells]
    widths = [max([cell_len(n)] + [cell_len(row[i]) for row in cells]) for i, n in enumerate(names)]
    out.write("  ".join(pad(n, w) for n, w in zip(names, widths)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in cells:
        out.write("  ".join(pad(c, w) for c, w in zip(row, widths)).rstrip() + "\n")
    out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n")
