"""The span lake on disk: atomic Parquet writes, the list of live files, compaction.

Layout (DESIGN §3)::

    LAKE/spans/dt=YYYY-MM-DD/part-*.parquet
    LAKE/span_events/dt=YYYY-MM-DD/part-*.parquet
    LAKE/span_links/dt=YYYY-MM-DD/part-*.parquet
    LAKE/_wal/            the collector's write-ahead log (never read by analyzers)
    LAKE/_compaction/     compaction records (see below)

Every path component comes from a constant, from the span's time (``dt=``) or from a
token that :func:`_safe_token` has checked, so nothing taken from span data can steer a
write outside the lake.

Compaction replaces many small files of a partition by one, while readers read. A reader
lists files and then opens them, so files must never vanish between the two and a reader
must never see a row twice. Protocol: (1) write the merged file under a hidden temporary
name; (2) write a record ``_compaction/<id>.json`` naming the new file and the files it
replaces; (3) rename the new file into place (atomic); (4) after a grace period delete the
replaced files and the record. :meth:`Lake.live_files` hides a replaced file as soon as its
replacement is visible, so a listing sees either the old files or the new one, never both,
and the old files stay readable for ``grace_seconds`` after they stop being listed.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .schema import DELTA_COLUMNS, PARTITION_TIME, SCHEMA_METADATA, TABLES

SORT_KEYS = {
    "spans": [("trace_id", "ascending"), ("start_time_unix_nano", "ascending"), ("span_id", "ascending")],
    "span_events": [("trace_id", "ascending"), ("span_id", "ascending"), ("time_unix_nano", "ascending")],
    "span_links": [("trace_id", "ascending"), ("span_id", "ascending")],
}

ROW_GROUP_SIZE = 1 << 20
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_DT_RE = re.compile(r"^dt=\d{4}-\d{2}-\d{2}$")


class LakeError(Exception):
    """A lake that cannot be read or written; the message says what to do."""


def _safe_token(token: str) -> str:
    if not _TOKEN_RE.match(token) or token in (".", ".."):
        raise ValueError(f"unsafe file token {token!r}")
    return token


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_parquet_atomic(table: pa.Table, path: Path, *, fsync: bool = True) -> None:
    """Write ``table`` to ``path`` so that readers see the whole file or nothing."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    names = table.schema.names
    try:
        pq.write_table(
            table,
            tmp,
            compression="zstd",
            row_group_size=ROW_GROUP_SIZE,
            use_dictionary=[c for c in names if c not in DELTA_COLUMNS],
            column_encoding={c: "DELTA_BINARY_PACKED" for c in names if c in DELTA_COLUMNS},
            write_statistics=True,
        )
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        _fsync_dir(path.parent)


def _dt_strings(times: pa.Array) -> pa.Array:
    return pc.strftime(pc.cast(times, pa.timestamp("ns", tz="UTC")), format="%Y-%m-%d")


@dataclass
class WriteResult:
    files: list[Path] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)


class Lake:
    """A span lake directory. Creating the object touches nothing on disk."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"Lake({str(self.root)!r})"

    @property
    def wal_dir(self) -> Path:
        return self.root / "_wal"

    @property
    def compaction_dir(self) -> Path:
        return self.root / "_compaction"

    def table_dir(self, table: str) -> Path:
        if table not in TABLES:
            raise ValueError(f"unknown lake table {table!r}")
        return self.root / table

    def ensure_writable(self) -> None:
        """Create the lake's directories or raise :class:`LakeError` saying why not."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for table in TABLES:
                (self.root / table).mkdir(exist_ok=True)
        except OSError as e:
            raise LakeError(f"cannot create lake directory {self.root}: {e.strerror}; "
                            "choose a directory you can write to (--dir)") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise LakeError(f"lake directory {self.root} is not writable; fix its permissions or choose another --dir")

    # ------------------------------------------------------------------ writing
    def write(self, tables: dict[str, pa.Table], *, token: str | None = None, fsync: bool = True) -> WriteResult:
        """Write buffered rows as one file per table and ``dt=`` partition.

        ``token`` names the files (``part-<token>.parquet``); writing the same rows with the
        same token again replaces the file with identical content, which makes WAL replay
        and re-import idempotent. Without a token the name is unique.
        """
        token = _safe_token(token) if token else time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:16]
        result = WriteResult()
        for name, table in tables.items():
            if table.num_rows == 0:
                result.rows[name] = 0
                continue
            times = table.column("start_time_unix_nano" if name == "spans" else PARTITION_TIME)
            dts = _dt_strings(times.combine_chunks() if isinstance(times, pa.ChunkedArray) else times)
            if PARTITION_TIME in table.schema.names:
                table = table.drop_columns([PARTITION_TIME])
            table = table.replace_schema_metadata(SCHEMA_METADATA)
            unique_dts = pc.unique(dts).to_pylist()
            for dt in unique_dts:
                part = table.filter(pc.equal(dts, dt)) if len(unique_dts) > 1 else table
                part = part.sort_by(SORT_KEYS[name])
                pdir = self.root / name / f"dt={dt}"
                pdir.mkdir(parents=True, exist_ok=True)
                path = pdir / f"part-{token}.parquet"
                write_parquet_atomic(part, path, fsync=fsync)
                result.files.append(path)
            result.rows[name] = table.num_rows
        return result

    # ------------------------------------------------------------------ reading
    def _records(self) -> list[dict]:
        out = []
        if not self.compaction_dir.is_dir():
            return out
        for p in sorted(self.compaction_dir.glob("*.json")):
            try:
                rec = json.loads(p.read_text())
                rec["_path"] = p
                out.append(rec)
            except (OSError, ValueError):
                continue
        return out

    def live_files(self, table: str = "spans") -> list[Path]:
        """The Parquet files a reader should read now (see the module docstring)."""
        tdir = self.table_dir(table)
        if not tdir.is_dir():
            return []
        files = sorted(p for p in tdir.glob("dt=*/*.parquet") if not p.name.startswith("."))
        present = set(files)
        hidden: set[Path] = set()
        for rec in self._records():
            if rec.get("table") != table:
                continue
            pdir = tdir / str(rec.get("partition", ""))
            if (pdir / str(rec.get("new", ""))) in present:
                hidden.update(pdir / old for old in rec.get("old", []))
        return [p for p in files if p not in hidden]

    # ------------------------------------------------------------------ compaction
    def compact(self, *, target_bytes: int = 256 << 20, grace_seconds: float = 60.0, progress=None) -> "CompactResult":
        """Merge each partition's small files, dropping duplicate spans. Safe while readers read."""
        import duckdb

        self.ensure_writable()
        result = CompactResult()
        result.deleted_files += self._finish_records(grace_seconds)
        con = duckdb.connect()
        try:
            for table in TABLES:
                tdir = self.table_dir(table)
                live = self.live_files(table)
                by_partition: dict[str, list[Path]] = {}
                for p in live:
                    if _DT_RE.match(p.parent.name):
                        by_partition.setdefault(p.parent.name, []).append(p)
                for partition, files in sorted(by_partition.items()):
                    readable = []
                    for f in files:
                        problem = check_lake_file(f, table)
                        if problem:
                            result.skipped.append(f"{f}: {problem}")
                        else:
                            readable.append(f)
                    for group in _bins(readable, target_bytes):
                        if len(group) < 2:
                            continue
                        before, after = self._compact_group(con, table, tdir / partition, group)
                        result.files_in += len(group)
                        result.files_out += 1
                        result.rows_in += before
                        result.rows_out += after
                        if progress:
                            progress(table, partition, len(group))
        finally:
            con.close()
        result.deleted_files += self._finish_records(grace_seconds)
        return result

    def _compact_group(self, con, table: str, pdir: Path, group: list[Path]) -> tuple[int, int]:
        schema = TABLES[table]
        cols = ", ".join(f'"{c}"' for c in schema.names)
        # Duplicates come from retransmitted OTLP batches and re-imports: the same span
        # (trace_id, span_id) or the same event on the same span at the same time.
        distinct = {
            "spans": "trace_id, span_id",
            "span_events": "trace_id, span_id, time_unix_nano, name",
            "span_links": "trace_id, span_id, linked_trace_id, linked_span_id",
        }[table]
        order = ", ".join(k for k, _ in SORT_KEYS[table])
        files_sql = "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in group) + "]"
        before = con.execute(f"SELECT count(*) FROM read_parquet({files_sql}, union_by_name=true)").fetchall()[0][0]
        merged = con.sql(
            f"SELECT DISTINCT ON ({distinct}) {cols} FROM read_parquet({files_sql}, union_by_name=true) "
            f"ORDER BY {order}"
        ).to_arrow_table()
        merged = merged.cast(schema) if merged.schema != schema else merged
        merged = merged.replace_schema_metadata(SCHEMA_METADATA)
        cid = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:16]
        new_name = f"part-compact-{cid}.parquet"
        tmp = pdir / f".{new_name}.tmp"
        write_parquet_atomic(merged, tmp)
        self.compaction_dir.mkdir(exist_ok=True)
        record = {"table": table, "partition": pdir.name, "new": new_name,
                  "old": [p.name for p in group], "created": time.time()}
        rec_path = self.compaction_dir / f"{cid}.json"
        rec_tmp = rec_path.with_name(f".{rec_path.name}.tmp")
        rec_tmp.write_text(json.dumps(record))
        with open(rec_tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(rec_tmp, rec_path)
        _fsync_dir(self.compaction_dir)
        os.replace(tmp, pdir / new_name)
        _fsync_dir(pdir)
        return before, merged.num_rows

    def _finish_records(self, grace_seconds: float) -> int:
        """Delete files replaced more than ``grace_seconds`` ago; undo half-done compactions."""
        deleted = 0
        now = time.time()
        for rec in self._records():
            table = rec.get("table")
            if table not in TABLES:
                continue
            partition = str(rec.get("partition", ""))
            if not _DT_RE.match(partition):
                continue
            pdir = self.root / table / partition
            new = str(rec.get("new", ""))
            if not _TOKEN_RE.match(new):
                continue
            if not (pdir / new).exists():
                # crashed between writing the record and the rename: the old files are live
                for tmp in pdir.glob(f".{new}.*"):
                    tmp.unlink(missing_ok=True)
                rec["_path"].unlink(missing_ok=True)
                continue
            if now - float(rec.get("created", 0)) < grace_seconds:
                continue
            for old in rec.get("old", []):
                if _TOKEN_RE.match(old):
                    p = pdir / old
                    if p.exists():
                        p.unlink()
                        deleted += 1
            rec["_path"].unlink(missing_ok=True)
        return deleted


@dataclass
class CompactResult:
    files_in: int = 0
    files_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    deleted_files: int = 0
    skipped: list[str] = field(default_factory=list)


def _bins(files: list[Path], target_bytes: int) -> list[list[Path]]:
    bins: list[list[Path]] = []
    cur: list[Path] = []
    size = 0
    for f in files:
        s = f.stat().st_size
        if cur and size + s > target_bytes:
            bins.append(cur)
            cur, size = [], 0
        cur.append(f)
        size += s
    if cur:
        bins.append(cur)
    return bins


REQUIRED_COLUMNS = {
    "spans": {"trace_id", "span_id", "start_time_unix_nano"},
    "span_events": {"trace_id", "span_id", "time_unix_nano"},
    "span_links": {"trace_id", "span_id"},
}


def check_lake_file(path: Path, table: str = "spans") -> str | None:
    """Why ``path`` cannot be read as a lake file of ``table``, or None if it can."""
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as e:
        return f"not a readable Parquet file ({str(e).splitlines()[0][:200]})"
    missing = REQUIRED_COLUMNS[table] - set(schema.names)
    if missing:
        return f"not an otel-assay {table} file (missing columns: {', '.join(sorted(missing))})"
    return None
