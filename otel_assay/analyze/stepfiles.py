"""Step files: a lake file's ``steps``, computed once and stored beside it.

``steps`` is the costly part of every analysis: a dedupe and a tree walk over every span
(10M spans: about 35 s on 2 cores, against about 14 s for trials, fingerprints and coverage
after it). A lake's span files never change once written: files are written whole under
new names, and compaction writes a new file and deletes the old ones. So a file's steps
can be computed once, when it is compacted, and read afterwards: the way Tempo computes a
trace's tree columns at compaction (reference/storage.md §1.1).

Layout: ``LAKE/steps/dt=D/STEM.DEF.SUM.parquet`` holds the steps of
``LAKE/spans/dt=D/STEM.parquet``. DEF is the start of ``definition()``, a hash of everything
that defines ``steps`` (its SQL, canonical JSON, DuckDB's version): two versions of
otel-assay on one lake keep apart files. SUM is the start of the step file's own SHA-256:
the engine hashes the file before reading it (0.1 s for the 85 MB of 10M steps), so a
damaged step file is never read, not even one whose damage a Parquet reader would not
notice (a flipped digit). The file's Parquet metadata (``STEP_FILE_KEY``) records the span
file it was computed from (name, size, a hash of its footer) and the price table's hash.

The engine reads a step file only when all of these match, and only for the trials that
lie wholly inside its span file among the files it reads. A trial with spans in another
file (a trace across a ``dt=`` boundary, spans that arrived after compaction, a span
stored twice) is computed from its spans, as without step files. Costs are priced again
when the engine's price table is another.

So a step file changes how fast an analysis is, never what it says. Deleting
``LAKE/steps`` while no analysis runs changes nothing but speed; an analysis reads the
step files it checked at open, as it reads the span files it listed.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..lake.files import _DT_RE, STEP_FILE_KEY

STEPS_DIR = "steps"

# The columns of `steps` (queries/steps.sql documents them), as a step file stores them.
STEPS_SCHEMA = pa.schema([
    ("trace_id", pa.string()), ("span_id", pa.string()), ("step_parent_id", pa.string()),
    ("depth", pa.int32()), ("seq", pa.int64()), ("step_kind", pa.string()), ("llm_call", pa.bool_()),
    ("source_convention", pa.string()), ("scope_name", pa.string()), ("name", pa.string()),
    ("agent_name", pa.string()), ("tool_name", pa.string()), ("tool_call_id", pa.string()),
    ("tool_args", pa.string()), ("model", pa.string()), ("response_model", pa.string()),
    ("provider", pa.string()), ("input_tokens", pa.int64()), ("output_tokens", pa.int64()),
    ("cost_usd", pa.float64()), ("cost_source", pa.string()), ("status", pa.string()),
    ("error_type", pa.string()), ("start_time_unix_nano", pa.int64()), ("duration_ns", pa.int64()),
    ("finish_reasons", pa.string()), ("requested_tools", pa.bool_()), ("output_text", pa.string()),
])


@lru_cache(maxsize=1)
def definition() -> str:
    """A hash of what ``steps`` is computed by: a step file written under another one is
    not read (an upgrade that changes a rule recomputes every trial)."""
    h = hashlib.sha256(b"otel-assay step file 1\n")
    queries = resources.files("otel_assay") / "queries"
    for name in ("span_kinds.sql", "steps.sql", "model_prices.sql"):  # model_prices: the pricing rule
        h.update((queries / name).read_bytes())
    h.update((resources.files("otel_assay.analyze") / "canonical.py").read_bytes())
    h.update(STEPS_SCHEMA.to_string().encode())
    h.update(duckdb.__version__.encode())  # hash() orders ties in seq
    return h.hexdigest()


def _tag() -> str:
    """DEF of a step file's name: the start of definition()."""
    return definition()[:16]


def steps_dir_for(span_file: Path) -> Path | None:
    """The directory of a lake span file's step files (``LAKE/steps/dt=D``); None for a
    file that is not in a lake's ``spans/dt=D/``."""
    if not (_DT_RE.match(span_file.parent.name) and span_file.parent.parent.name == "spans"):
        return None
    return span_file.parent.parent.parent / STEPS_DIR / span_file.parent.name


_HEX = set("0123456789abcdef")


def _parts(step_name: str) -> tuple[str, str, str] | None:
    """(STEM, DEF, SUM) of a step file name ``STEM.DEF.SUM.parquet``."""
    if not step_name.endswith(".parquet") or step_name.startswith("."):
        return None
    parts = step_name[:-len(".parquet")].rsplit(".", 2)
    if len(parts) != 3 or not all(len(x) == 16 and set(x) <= _HEX for x in parts[1:]):
        return None
    return parts[0], parts[1], parts[2]


def _candidates(span_file: Path) -> list[Path]:
    """The step files of the current definition named after ``span_file``."""
    sdir = steps_dir_for(span_file)
    if sdir is None:
        return []
    try:
        names = os.listdir(sdir)
    except OSError:
        return []
    return sorted(sdir / n for n in names
                  if (p := _parts(n)) and p[0] == span_file.stem and p[1] == _tag())


def _file_sum(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()[:16]


def _stamp(span_file: Path) -> dict:
    """What identifies a span file's content: name, size and its Parquet footer (row group
    offsets and statistics: two different files practically never share one)."""
    with open(span_file, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 8))
        tail = f.read(8)
        footer_len = int.from_bytes(tail[:4], "little") if len(tail) == 8 and tail[4:] == b"PAR1" else 0
        f.seek(max(0, size - 8 - footer_len))
        footer = f.read(footer_len + 8)
    return {"source": span_file.name, "size": size, "footer_sha256": hashlib.sha256(footer).hexdigest(),
            "definition": definition()}


class StepFile(NamedTuple):
    path: Path
    prices: str  # price_table_hash() of the prices its costs were computed with


def checked_step_file(span_file: Path) -> StepFile | None:
    """The step file of ``span_file`` if there is one computed from this very file under
    the current definition and undamaged, else None (a missing, stale, foreign or damaged
    step file is not an error: the steps are then computed from the spans)."""
    span_file = Path(span_file)
    for path in _candidates(span_file):
        step_file = _checked(span_file, path)
        if step_file:
            return step_file
    return None


def _checked(span_file: Path, path: Path) -> StepFile | None:
    try:
        if _file_sum(path) != _parts(path.name)[2]:
            return None
        meta = pq.read_metadata(path)
        recorded = json.loads((meta.metadata or {}).get(STEP_FILE_KEY, b"null"))
        stamp = _stamp(span_file)
        # names and types (DuckDB marks the columns it knows hold no NULL as not nullable)
        columns = [(f.name, f.type) for f in meta.schema.to_arrow_schema()]
        if (not isinstance(recorded, dict) or {k: recorded.get(k) for k in stamp} != stamp
                or not isinstance(recorded.get("prices"), str) or columns != [(f.name, f.type) for f in STEPS_SCHEMA]):
            return None
    except Exception:  # whatever is wrong with it (deeply nested JSON, a directory): not used
        return None
    return StepFile(path, recorded["prices"])


def price_table_hash(con) -> str:
    """A hash of the rows of ``model_prices`` as bound on ``con`` (its `vendor` column aside):
    stored costs computed with other prices are priced again when read."""
    # JSON: a missing value stays in the text as null (a separator join would drop it, and
    # `,gpt-4o,,10` and `,gpt-4o,10,` would hash alike)
    return con.execute(
        "SELECT md5(coalesce(string_agg(j, chr(30) ORDER BY j), '')) FROM (SELECT to_json({"
        "'provider': provider, 'model': model, 'input': input_usd_per_mtok, 'output': output_usd_per_mtok})::VARCHAR "
        "AS j FROM model_prices)").fetchall()[0][0]


__all__ = ["STEPS_DIR", "STEPS_SCHEMA", "StepFile", "checked_step_file", "definition", "price_table_hash",
           "steps_dir_for"]
