"""Writing step files: the steps of each span file's trials, computed once (at compaction)
and stored beside it, so that reading a lake computes steps only for span files without a
current step file. The file format and how readers check a step file are in
:mod:`.stepfiles`; this module computes them with the :class:`~.engine.Engine`, which is
why it is apart (the engine reads step files, and this module runs the engine).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from ..lake.files import STEP_FILE_KEY, Lake, LakeError, check_lake_file, sql_list
from .engine import Engine
from .stepfiles import (STEPS_DIR, _candidates, _file_sum, _parts, _stamp, _tag, checked_step_file, price_table_hash,
                        steps_dir_for)

def write_step_file(span_file: Path, *, threads: int | None = None, memory_limit: str | None = None) -> Path:
    """Compute the steps of ``span_file``'s trials and store them as its step file
    (written to a temporary name, then renamed: a reader never sees half a file)."""
    span_file = Path(span_file)
    sdir = steps_dir_for(span_file)
    if sdir is None:
        raise ValueError(f"{span_file} is not a lake span file (LAKE/spans/dt=YYYY-MM-DD/NAME.parquet)")
    stamp = _stamp(span_file)  # before reading: a file replaced meanwhile gets a stamp that does not match it
    sdir.mkdir(parents=True, exist_ok=True)
    tmp = sdir / f".{span_file.stem}.{_tag()}.tmp"
    # the shipped prices, whatever OTEL_ASSAY_PRICES says: stored costs are priced again when
    # read under another table, and a user's table has no say in what compaction writes
    with Engine([span_file], threads=threads, memory_limit=memory_limit, step_files=False, prices=False) as eng:
        eng.materialize(["steps"])
        meta = json.dumps({**stamp, "prices": price_table_hash(eng.con)}).replace("'", "''")
        try:
            # sorted by trial: a step file of one trace-id range reads only its row groups
            eng.con.execute(
                f"COPY (SELECT * FROM steps ORDER BY trace_id, seq) TO {sql_list([tmp])[1:-1]} "
                f"(FORMAT parquet, COMPRESSION zstd, KV_METADATA {{'{STEP_FILE_KEY.decode()}': '{meta}'}})")
            path = sdir / f"{span_file.stem}.{_tag()}.{_file_sum(tmp)}.parquet"
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):  # not to hide why the write failed
                tmp.unlink(missing_ok=True)
    return path


@dataclass
class StepFilesResult:
    written: list[Path] = field(default_factory=list)
    kept: int = 0
    removed: int = 0  # step files of span files that are gone, or of another definition
    damaged: list[Path] = field(default_factory=list)  # damaged or stale step files: deleted
    no_trace_id: list[Path] = field(default_factory=list)  # span files with spans without a trace id
    skipped: list[str] = field(default_factory=list)  # unreadable span files, and why
    failed: list[str] = field(default_factory=list)  # step files that could not be written, and why


def write_step_files(lake_dir, *, threads: int | None = None, memory_limit: str | None = None,
                     grace_seconds: float = 60.0) -> StepFilesResult:
    """Give every live span file of the lake a current step file (``otel-assay compact``
    runs this after merging). A current, undamaged step file is kept; a damaged or stale
    one (no engine reads it) is deleted and written again; those of span files that are
    gone are deleted. Those of another definition (another otel-assay version, whose
    analyses may be reading them) are deleted ``grace_seconds`` after a run first finds
    them. A step file that cannot be written is reported (``failed``): it is a cache, and
    its span file's steps are then computed when read. Holds the lake's compaction lock
    (:class:`LakeBusy`)."""
    lake = Lake(lake_dir)
    if not lake.table_dir("spans").is_dir():
        raise LakeError(f"{lake.root} is not a span lake (no spans/ directory)")
    result = StepFilesResult()
    lock = lake.compaction_lock()
    try:
        for span_file in lake.live_files("spans"):
            current = checked_step_file(span_file)
            for other in _candidates(span_file):  # damaged, or of a span file replaced under its name
                if other != (current and current.path):
                    result.damaged.append(other)
                    with contextlib.suppress(OSError):
                        other.unlink()
            if current:
                result.kept += 1
                continue
            problem = check_lake_file(span_file)
            if problem:
                result.skipped.append(f"{span_file}: {problem}")
                continue
            if not _has_trace_ids(span_file):
                # a span without a trace id is no trial's: it cannot be told apart from
                # another file's, so such a file is always computed from its spans
                result.no_trace_id.append(span_file)
                continue
            try:
                result.written.append(write_step_file(span_file, threads=threads, memory_limit=memory_limit))
            except (duckdb.Error, LakeError, OSError) as e:
                reason = str(e).splitlines()[0] if str(e) else type(e).__name__
                result.failed.append(f"{steps_dir_for(span_file)}/{span_file.stem}.*: {reason}")
        result.removed = _remove_unused(lake, grace_seconds)
    finally:
        lock.close()
    return result


def _remove_unused(lake: Lake, grace_seconds: float) -> int:
    """Delete the step files no reader of this definition needs: those of span files gone
    from the disk (deleted after compaction's own grace period), at once; those of another
    definition once ``grace_seconds`` have passed since a run first found them (the first
    finding is kept in ``LAKE/steps/other-definitions.json``); leftovers of dead writes."""
    sroot = lake.root / STEPS_DIR
    if not sroot.is_dir():
        return 0
    spans = lake.table_dir("spans")
    seen_path = sroot / "other-definitions.json"
    try:
        seen = json.loads(seen_path.read_text())
        seen = seen if isinstance(seen, dict) else {}
    except (OSError, ValueError, RecursionError):
        seen = {}
    now, removed, still = time.time(), 0, {}
    for p in sorted(sroot.glob("dt=*/*")):
        if p.name.startswith(".") and p.name.endswith(".tmp"):  # a write that died (we hold the lock)
            with contextlib.suppress(OSError):
                p.unlink()
            continue
        parts = _parts(p.name)
        if parts is None or not p.is_file():
            continue  # not ours: left alone
        stem, def16, _ = parts
        gone = not (spans / p.parent.name / f"{stem}.parquet").exists()
        key = f"{p.parent.name}/{p.name}"
        if def16 != _tag() and not gone:
            first = seen.get(key)
            first = first if isinstance(first, (int, float)) else now
            if now - first < grace_seconds:
                still[key] = first
                continue
        elif not gone:
            continue
        try:
            p.unlink()
            removed += 1
        except OSError:
            pass
    with contextlib.suppress(OSError):
        if still:
            seen_path.write_text(json.dumps(still))
        else:
            seen_path.unlink(missing_ok=True)
    return removed


def _has_trace_ids(span_file: Path) -> bool:
    f = pq.ParquetFile(span_file)
    col = f.schema_arrow.get_field_index("trace_id")
    if col < 0:
        return False
    meta = f.metadata
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(col).statistics
        if stats is None or not stats.has_null_count or stats.null_count:
            return False
    return True



__all__ = ["StepFilesResult", "write_step_file", "write_step_files"]
