"""Labels for traces that carry no ``assay.*`` attributes (foreign instrumentation).

``otel-assay label LAKE --file labels.csv`` maps a trace (by trace id, or by
``gen_ai.conversation.id`` / ``session.id``) to a scenario, version, outcome, and
optionally run and score. Labels never touch the lake's span files: each call writes one
small file ``LAKE/labels/labels-<time>-<id>.parquet`` (temporary name, fsync, rename), and
the ``trial_labels`` view joins them into ``trials``. Labels merge column by column: for
each key, each of scenario, version, outcome, run and score comes from the newest label
that gives it, so a later file with only ``trace_id,outcome`` adds outcomes and keeps the
scenarios labelled before. A label overrides what the spans say.
"""

from __future__ import annotations

import csv
import math
import os
import time
import uuid
from pathlib import Path

import pyarrow as pa

from ..lake.files import LakeError, list_dir, write_parquet_atomic

LABELS_DIR = "labels"

LABELS_SCHEMA = pa.schema([
    ("key_kind", pa.string()),        # trace_id | conversation_id | session_id
    ("key", pa.string()),
    ("scenario", pa.string()),
    ("version", pa.string()),
    ("outcome", pa.string()),         # pass | fail | NULL
    ("run_id", pa.string()),
    ("score", pa.float64()),
    ("labelled_at_unix_nano", pa.int64()),
])

# CSV header -> key kind; the attribute names are accepted as written in the spans
KEY_COLUMNS = {
    "trace_id": "trace_id",
    "gen_ai.conversation.id": "conversation_id",
    "conversation_id": "conversation_id",
    "session.id": "session_id",
    "session_id": "session_id",
}
VALUE_COLUMNS = {"scenario", "version", "outcome", "run", "run_id", "score"}
OUTCOMES = {"pass", "fail"}


class LabelError(ValueError):
    """A labels file that cannot be used; the message names the line and the fix."""


def read_labels_csv(path: str | os.PathLike) -> pa.Table:
    """Parse a labels CSV into a table of :data:`LABELS_SCHEMA` (without writing it)."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            header = [h.strip() for h in reader.fieldnames or []]
    except FileNotFoundError:
        raise LabelError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise LabelError(f"cannot read {path}: {e}") from None
    if not rows:
        raise LabelError(f"{path} has no label rows (expected a header such as trace_id,scenario,version,outcome)")
    keys = [h for h in header if h in KEY_COLUMNS]
    unknown = [h for h in header if h not in KEY_COLUMNS and h not in VALUE_COLUMNS]
    if len(keys) != 1:
        hint = ("; the file must be comma-separated" if len(header) == 1 and any(d in header[0] for d in ";\t|")
                else "")
        raise LabelError(f"{path}: the header needs exactly one key column out of "
                         f"{', '.join(KEY_COLUMNS)}; found {', '.join(keys) or 'none'}{hint}")
    if unknown:
        raise LabelError(f"{path}: unknown column(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(sorted(VALUE_COLUMNS | set(KEY_COLUMNS)))}")
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise LabelError(f"{path}: column(s) {', '.join(repeated)} appear more than once in the header")
    key_col = keys[0]
    now = time.time_ns()
    cols: dict[str, list] = {n: [] for n in LABELS_SCHEMA.names}
    seen: dict[str, tuple[int, dict]] = {}
    for line, row in enumerate(rows, start=2):
        # a short row would erase the labels of its missing columns; a long one means a
        # quoting or delimiter mistake
        if None in row or any(v is None for v in row.values()):
            n = len([v for k, v in row.items() if k is not None and v is not None]) + len(row.get(None) or [])
            raise LabelError(f"{path} line {line}: {n} field(s), the header has {len(header)}; "
                             "check the delimiter (comma) and quoting")
        row = {k.strip(): v.strip() for k, v in row.items()}
        key = row.get(key_col) or ""
        if not key:
            raise LabelError(f"{path} line {line}: empty {key_col}")
        if key_col == "trace_id":
            key = key.lower()
        if key in seen:
            first, values = seen[key]
            if values != row:  # which row should win is a guess; the user knows
                raise LabelError(f"{path} line {line}: {key_col} {key} is labelled differently on line {first}; "
                                 "keep one row per key")
            continue
        seen[key] = (line, row)
        if key_col == "trace_id":
            if len(key) != 32 or any(c not in "0123456789abcdef" for c in key):
                raise LabelError(f"{path} line {line}: trace_id {key!r} is not 32 hex digits")
        outcome = (row.get("outcome") or "").lower() or None
        if outcome is not None and outcome not in OUTCOMES:
            raise LabelError(f"{path} line {line}: outcome {row.get('outcome')!r} must be pass, fail or empty")
        score = row.get("score") or None
        if score is not None:
            try:
                score = float(score)
            except ValueError:
                raise LabelError(f"{path} line {line}: score {score!r} is not a number") from None
            if not math.isfinite(score):
                raise LabelError(f"{path} line {line}: score must be finite")
        cols["key_kind"].append(KEY_COLUMNS[key_col])
        cols["key"].append(key)
        cols["scenario"].append(row.get("scenario") or None)
        cols["version"].append(row.get("version") or None)
        cols["outcome"].append(outcome)
        cols["run_id"].append(row.get("run_id") or row.get("run") or None)
        cols["score"].append(score)
        cols["labelled_at_unix_nano"].append(now)
    return pa.table(cols, schema=LABELS_SCHEMA)


def write_labels(lake_dir: str | os.PathLike, labels: pa.Table) -> Path:
    """Add a labels file to the lake atomically; returns its path."""
    root = Path(lake_dir)
    if not (root / "spans").is_dir():
        raise LakeError(f"{root} is not a span lake (no spans/ directory)")
    ldir = root / LABELS_DIR
    try:
        ldir.mkdir(exist_ok=True)
    except OSError as e:
        raise LakeError(f"cannot create {ldir}: {e.strerror}") from None
    path = ldir / f"labels-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:12]}.parquet"
    write_parquet_atomic(labels.cast(LABELS_SCHEMA), path)
    return path


def label_files(lake_dir: Path) -> list[Path]:
    """The lake's label files, oldest first (hidden temporary files excluded)."""
    ldir = Path(lake_dir) / LABELS_DIR
    # listed or an error: a label file left out would change trials' scenarios and outcomes
    return sorted(Path(e.path) for e in list_dir(ldir) if e.name.endswith(".parquet") and not e.name.startswith("."))
