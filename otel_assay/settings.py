"""Every ``OTEL_ASSAY_*`` environment variable: its name, its default, and how its text is read.

Settings are read here and nowhere else, so that one variable means one thing everywhere and a
user finds them all in one list (``docs/capture.md`` and ``docs/collector.md`` document them).
Each function reads the environment when called, not at import, because tests and the live
runner change variables between runs in one process.

A value that cannot be read is never silently taken for something else: a flag or a number
that is not one logs a warning naming the variable and falls back to the default (as the
OpenTelemetry SDK does with its own ``OTEL_*`` variables, so a typo cannot stop an agent);
a memory size that DuckDB would reject raises :class:`~otel_assay.errors.UsageError` (exit 3)
where a command opens the lake, because a wrong limit there would surface much later as a
confusing lake error.
"""

from __future__ import annotations

import logging
import os
import re

from .errors import UsageError

log = logging.getLogger("otel_assay.settings")

# the spellings of a boolean the OpenTelemetry SDK and most CLIs accept, compared lowercased
TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off", ""})

DIR = "OTEL_ASSAY_DIR"
DISABLED = "OTEL_ASSAY_DISABLED"
EXPORTER = "OTEL_ASSAY_EXPORTER"
PURE_PYTHON = "OTEL_ASSAY_PURE_PYTHON"
RUN_ID = "OTEL_ASSAY_RUN_ID"
VERSION = "OTEL_ASSAY_VERSION"
SCENARIO = "OTEL_ASSAY_SCENARIO"
PRICES = "OTEL_ASSAY_PRICES"
TOKEN = "OTEL_ASSAY_TOKEN"
MEMORY_LIMIT = "OTEL_ASSAY_MEMORY_LIMIT"
FLUSH_ROWS = "OTEL_ASSAY_FLUSH_ROWS"
FLUSH_SECONDS = "OTEL_ASSAY_FLUSH_SECONDS"
MAX_UNWRITTEN_SPANS = "OTEL_ASSAY_MAX_UNWRITTEN_SPANS"

DEFAULT_DIR = "traces"
EXPORTERS = ("parquet", "otlp")

# (name, default, what it does): the list docs/ and `otel-assay --help` point to
SETTINGS: tuple[tuple[str, str, str], ...] = (
    (DIR, DEFAULT_DIR, "the lake captured spans go to, and the lake commands read by default"),
    (DISABLED, "false", "true: `import otel_assay.auto` instruments nothing"),
    (EXPORTER, "parquet", "parquet: write the lake in process; otlp: send spans to an OTLP endpoint"),
    (PURE_PYTHON, "false", "true: the receiver and `import` take their simple paths only (protobuf with the "
     "generated classes, never the compiled decoder; OTLP/JSON with json.loads, never msgspec)"),
    (RUN_ID, "(a new id per process)", "the run id stamped on every trial"),
    (VERSION, "(none)", "the agent version of trials that do not name one"),
    (SCENARIO, "(none)", "the scenario of trials that do not name one"),
    (PRICES, "(built-in table)", "a CSV of model prices (model,input_per_mtok,output_per_mtok)"),
    (TOKEN, "(none)", "the bearer token `otel-assay collect` requires"),
    (MEMORY_LIMIT, "(DuckDB's: 80% of RAM)", "DuckDB's memory limit for lake queries, like 2GiB"),
    (FLUSH_ROWS, "100000", "spans the in-process exporter buffers before it writes a file"),
    (FLUSH_SECONDS, "5", "seconds the oldest buffered span waits before a file is written"),
    (MAX_UNWRITTEN_SPANS, "500000", "spans held while lake writes keep failing, before the oldest are dropped"),
)


def text(name: str) -> str | None:
    """The variable's value stripped of surrounding white space; None when unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or None


def flag(name: str, default: bool = False) -> bool:
    """A boolean variable: 1/true/yes/on or 0/false/no/off, any case; unset is ``default``."""
    value = os.environ.get(name)
    if value is None:
        return default
    v = value.strip().lower()
    if v in TRUE:
        return True
    if v in FALSE:
        return False if v else default
    log.warning("%s=%r is not a boolean (use true or false); using %s", name, value, default)
    return default


def number(name: str, default: float, *, integer: bool = False, minimum: float = 0) -> float:
    """A finite number of at least ``minimum`` (a whole number with ``integer``); unset is
    ``default``, and so is a value that is no such number, with a warning."""
    value = text(name)
    if value is None:
        return default
    try:
        n = int(value) if integer else float(value)
    except ValueError:
        n = None
    if n is None or not minimum <= n < float("inf"):  # (NaN compares false)
        kind = "a whole number" if integer else "a number"
        log.warning("%s=%r is not %s of at least %s; using %s", name, value, kind, minimum, default)
        return default
    return n


# DuckDB's own spellings of a size
_SIZE = re.compile(r"\d+(\.\d+)?\s*([KMGT]i?B|B|bytes)?", re.IGNORECASE)


def memory_limit(default: str | None = None) -> str | None:
    """DuckDB's memory limit (``OTEL_ASSAY_MEMORY_LIMIT``, else ``default``; None: DuckDB's own)."""
    limit = text(MEMORY_LIMIT) or default
    if limit is not None and not _SIZE.fullmatch(limit):
        raise UsageError(f"{MEMORY_LIMIT}={limit!r} is not a memory size; set it like 1.5GB, 800MB or 2GiB")
    return limit


def lake_dir() -> str:
    """The lake captured spans go to and commands read when none is named."""
    return text(DIR) or DEFAULT_DIR


def exporter() -> str | None:
    """``parquet`` or ``otlp`` as set (lowercased); None when unset. An unknown value is
    reported by the caller, which knows what it falls back to."""
    value = text(EXPORTER)
    return value.lower() if value else None


def disabled() -> bool:
    return flag(DISABLED)


def pure_python() -> bool:
    return flag(PURE_PYTHON)


def run_id() -> str | None:
    return text(RUN_ID)


def version() -> str | None:
    return text(VERSION)


def scenario() -> str | None:
    return text(SCENARIO)


def prices() -> str | None:
    return text(PRICES)


def token() -> str | None:
    return text(TOKEN)


def flush_rows() -> int:
    return int(number(FLUSH_ROWS, 100_000, integer=True, minimum=1))


def flush_seconds() -> float:
    return number(FLUSH_SECONDS, 5.0)


def max_unwritten_spans() -> int:
    return int(number(MAX_UNWRITTEN_SPANS, 500_000, integer=True, minimum=1))
