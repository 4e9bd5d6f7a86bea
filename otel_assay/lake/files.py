"""The span lake on disk: atomic Parquet writes, the list of live files, compaction.

Layout::

    LAKE/spans/dt=YYYY-MM-DD/part-*.parquet
    LAKE/span_events/dt=YYYY-MM-DD/part-*.parquet
    LAKE/span_links/dt=YYYY-MM-DD/part-*.parquet
    LAKE/_wal/            the collector's write-ahead log (never read by analyzers)
    LAKE/_compaction/     compaction records (see below)
    LAKE/_imports/        one record per file `otel-assay import` has read to its end

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

import atexit
import datetime
import fnmatch
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import settings
from .schema import DELTA_COLUMNS, PARTITION_TIME, PLAIN_COLUMNS, SCHEMA_METADATA, TABLES

SORT_KEYS = {
    "spans": [("trace_id", "ascending"), ("start_time_unix_nano", "ascending"), ("span_id", "ascending")],
    "span_events": [("trace_id", "ascending"), ("span_id", "ascending"), ("time_unix_nano", "ascending")],
    "span_links": [("trace_id", "ascending"), ("span_id", "ascending")],
}

ROW_GROUP_SIZE = 1 << 20
# A write of more rows than this per partition becomes several files of whole traces, encoded
# on separate threads: Arrow encodes one file's columns one after another, and encoding is
# most of a large write (bench/bench_lake_write.py, 1M spans on 2 cores: encoding 1.6 s as one
# file, 0.8-0.9 s as two; the whole write 0.41-0.57 -> 0.62-0.76M rows/s). Fixed, not the
# machine's core count, so that a WAL replay on another machine writes the same file names.
FILE_ROWS = 1 << 19
_PARALLEL_ROWS = 1 << 16  # measured: below a few 10k rows a thread pool costs more than it saves
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_DT_RE = re.compile(r"^dt=\d{4}-\d{2}-\d{2}$")
# The Parquet metadata key of a step file (LAKE/steps/: analyze/stepfiles.py): such a file
# has a span file's id and time columns, and must never be read as one
STEP_FILE_KEY = b"otel_assay.steps"


class LakeError(Exception):
    """A lake that cannot be read or written; the message says what to do."""


class LakeBusy(LakeError):
    """Another process holds the lake's compaction lock."""


# part-<token>[-<i>of<n>].parquet where the token is a write-ahead log segment's name
_SEGMENT_FILE_RE = re.compile(r"^part-(seg-.+?)(?:-\d+of\d+)?\.parquet$")


def _safe_token(token: str) -> str:
    if not _TOKEN_RE.match(token) or token in (".", ".."):
        raise ValueError(f"unsafe file token {token!r}")
    return token


def cannot_read(path, e: OSError) -> str:
    """The message for a lake path that exists but cannot be listed or read."""
    return (f"cannot read {path}: {e.strerror or e}; a lake read in part would give wrong answers: "
            "let the user running otel-assay read it (or move it out of the lake) and run again")


def list_dir(path: Path) -> list[os.DirEntry]:
    """The entries of directory ``path`` ([] if there is none); a LakeError naming ``path`` if
    it exists but cannot be listed.

    ``Path.glob``, ``glob.glob`` and ``os.walk`` skip a directory they cannot list without
    a word: with one partition unreadable, a query counted half the lake's spans and the
    gate decided on half the trials, and an unreadable ``spans/`` read as an empty lake."""
    try:
        with os.scandir(path) as it:
            return list(it)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise LakeError(cannot_read(path, e)) from None


def _is_partition(entry: os.DirEntry) -> bool:
    """Whether ``entry`` is a ``dt=`` partition directory (a link to one counts, as with glob)."""
    return entry.name.startswith("dt=") and _entry_is_dir(entry)


def _entry_is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError as e:  # a link into a directory that cannot be searched
        raise LakeError(cannot_read(entry.path, e)) from None


_MAGIC_RE = re.compile(r"[*?[]")


def glob_paths(pattern: str) -> list[Path]:
    """The paths that ``glob.glob(pattern, recursive=True)`` matches, sorted; a LakeError
    naming the first directory on the way that cannot be listed, where glob would leave
    its files out in silence (see :func:`list_dir`).

    Glob's rules: ``*``, ``?`` and ``[...]`` match within one name, and not a name that
    starts with a dot unless the pattern's part does; ``**`` matches any number of
    directories (and files, as the last part); links are followed."""
    found = ["/" if pattern.startswith("/") else ""]
    parts = [p for p in pattern.split("/") if p]
    for i, part in enumerate(parts):
        last = i == len(parts) - 1 and not pattern.endswith("/")  # a trailing / matches directories only
        step = []
        for base in found:
            if part == "**":
                step.append(base)
                step.extend(_below(base, files=last))
            elif not _MAGIC_RE.search(part):
                path = os.path.join(base, part)
                if _exists(path, dir_only=not last):
                    step.append(path)
            else:
                for entry in list_dir(Path(base or ".")):
                    if (entry.name.startswith(".") and not part.startswith(".")) or not fnmatch.fnmatchcase(entry.name, part):
                        continue
                    if last or _entry_is_dir(entry):
                        step.append(os.path.join(base, entry.name))
        found = step
    return sorted({Path(p) for p in found if p})


def _exists(path: str, *, dir_only: bool) -> bool:
    """Whether ``path`` is there (a directory, with ``dir_only``); a LakeError when a
    directory above it cannot be searched, where ``os.path.exists`` says False."""
    try:
        st = os.stat(path) if dir_only else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise LakeError(cannot_read(path, e)) from None
    return stat.S_ISDIR(st.st_mode) or not dir_only


def _below(base: str, *, files: bool) -> list[str]:
    """Every path below directory ``base`` that ``**`` reaches: its directories (and files),
    at any depth, none hidden."""
    out = []
    for entry in list_dir(Path(base or ".")):
        if entry.name.startswith("."):
            continue
        path = os.path.join(base, entry.name)
        if _entry_is_dir(entry):
            out.append(path)
            out.extend(_below(path, files=files))
        elif files:
            out.append(path)
    return out


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_temp_dirs: dict[int, str] = {}  # process id -> the private temp directory it made
_temp_lock = threading.Lock()


def _remove_temp_dir(path: str, pid: int) -> None:
    if os.getpid() == pid:  # not in a forked child: the directory is its parent's
        shutil.rmtree(path, ignore_errors=True)


def private_temp_dir() -> str:
    """This process's directory for DuckDB's spill files, made on first use and removed when
    the process exits.

    Made by ``mkdtemp``: a fresh directory of mode 0700 under a name nobody can predict,
    never one that already exists. A fixed name in the shared temp directory (such as one
    derived from the process id) lets another user plant a symlink there, through which
    queries would read and write where the link points, or create the directory first and
    receive spill files holding lake data."""
    with _temp_lock:
        pid = os.getpid()
        path = _temp_dirs.get(pid)
        if path is None or os.path.islink(path) or not os.path.isdir(path):  # removed under us: a new one
            path = _temp_dirs[pid] = tempfile.mkdtemp(prefix="otel-assay-duckdb-")
            atexit.register(_remove_temp_dir, path, pid)
        return path


def duckdb_connect(memory_limit: str | None = None):
    """A DuckDB connection for work over lake files: at most ``memory_limit`` (else
    OTEL_ASSAY_MEMORY_LIMIT, else DuckDB's own), spilling past it to this process's private
    temp directory; an in-memory DuckDB would otherwise spill into ./.tmp of whatever
    directory the command runs in (a CI checkout)."""
    # imported here: the span exporter loads this module in every instrumented agent and
    # writes with pyarrow alone; duckdb (0.16 s) loads only when a query or compaction runs
    import duckdb

    con = duckdb.connect()
    con.execute("SET temp_directory = ?", [private_temp_dir()])
    memory_limit = memory_limit or settings.memory_limit()
    if memory_limit:
        con.execute("SET memory_limit = ?", [memory_limit])
    return con


def sql_list(paths) -> str:
    """``paths`` as a DuckDB list literal of quoted file names, for ``read_parquet``."""
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


_DUCKDB_TYPES = {pa.string(): "VARCHAR", pa.int8(): "TINYINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
                 pa.float64(): "DOUBLE", pa.map_(pa.string(), pa.string()): "MAP(VARCHAR, VARCHAR)"}


def missing_columns_sql(schema: pa.Schema, present) -> str:
    """``, NULL::<type> AS "<column>"`` for each column of ``schema`` not in ``present``.

    Files of an older schema version or from another writer may lack columns that the views
    and compaction name; ``union_by_name`` fills them only when some other file has them.
    """
    present = set(present)
    return "".join(f', NULL::{_DUCKDB_TYPES[f.type]} AS "{f.name}"' for f in schema if f.name not in present)


def exclusive_lock(path: Path, busy: Exception):
    """An exclusive lock on ``path``, held while the returned file is open (the OS drops it
    when the process dies, so a crash never leaves it held); raises ``busy`` when another
    process holds it."""
    # imported here: fcntl exists only on POSIX, and the rest of this module (reading and
    # writing lake files) must import everywhere
    import fcntl

    f = open(path, "a+b")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise busy from None
    return f


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
            use_dictionary=[c for c in names if c not in DELTA_COLUMNS and c not in PLAIN_COLUMNS],
            column_encoding={c: "DELTA_BINARY_PACKED" for c in names if c in DELTA_COLUMNS},
            # min/max of the attribute maps' keys and values prune nothing (no reader ranges over
            # a map) and cost a tenth of a small file's write: each long JSON value is compared
            write_statistics=[c for c in names if not pa.types.is_map(table.schema.field(c).type)],
        )
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        fsync_dir(path.parent)


_NS_PER_DAY = 86_400 * 10**9
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()


def _days(times: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """UTC day number of each time (ns since the epoch); strftime per row costs seconds per million."""
    if times.null_count:
        raise ValueError("rows without a partition time cannot be placed in a dt= partition")
    return np.floor_divide(times.to_numpy(), _NS_PER_DAY)


def _dt_name(day: int) -> str:
    return "dt=" + datetime.date.fromordinal(_EPOCH_ORDINAL + int(day)).isoformat()


def _dense_rank(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each value's rank among the distinct values (nulls stay null): an int key that sorts
    like the strings. Sorting the distinct trace ids once and then ints halved the sort on
    the benchmark (10 spans per trace), against comparing strings row by row."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    enc = pc.dictionary_encode(values)
    order = pc.sort_indices(enc.dictionary).to_numpy()
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return pc.take(pa.array(rank), enc.indices)


def _sort_order(table: pa.Table, keys: list[tuple[str, str]], days: np.ndarray | None) -> np.ndarray | None:
    """Row order that sorts ``table`` by ``days`` (if given) then ``keys``; None if it already is.

    Equal to ``table.sort_by(keys)`` within each day: the rank sorts like its string, and
    Arrow's sort is stable, so even duplicate rows keep their relative order.
    """
    cols, sort_keys = [], []
    if days is not None:
        cols.append(pa.array(days))
        sort_keys.append(("k0", "ascending"))
    for i, (name, direction) in enumerate(keys):
        col = table.column(name)
        cols.append(_dense_rank(col) if i == 0 and pa.types.is_string(col.type) else col)
        sort_keys.append((f"k{len(cols) - 1}", direction))
    order = pc.sort_indices(pa.table(cols, names=[k for k, _ in sort_keys]), sort_keys=sort_keys).to_numpy()
    return None if np.array_equal(order, np.arange(len(order))) else order


def _trace_cuts(trace_ids: pa.ChunkedArray, k: int) -> list[int]:
    """Row positions that cut rows sorted by trace id into about ``k`` equal runs without
    splitting a trace (fewer runs when a trace is longer than a run)."""
    n = len(trace_ids)
    ids = _one_array(trace_ids)
    changed = pc.fill_null(pc.not_equal(ids.slice(1), ids.slice(0, n - 1)), True)
    starts = np.flatnonzero(changed.to_numpy(zero_copy_only=False)) + 1  # where a new trace begins
    cuts = {int(starts[j]) for j in np.searchsorted(starts, [n * i // k for i in range(1, k)]) if j < len(starts)}
    return [0, *sorted(cuts), n]


def _file_slices(part: pa.Table) -> list[pa.Table]:
    """The rows of one partition, sorted by trace id, as the contents of its files: one file,
    or past FILE_ROWS rows several of whole traces (a reader then sees a trace of one write
    whole or not at all)."""
    k = -(-part.num_rows // FILE_ROWS)
    cuts = _trace_cuts(part.column("trace_id"), k) if k > 1 else [0, part.num_rows]
    return [part.slice(a, b - a) for a, b in zip(cuts, cuts[1:])]


def _in_threads(fn, items: list, workers: int) -> list:
    """``[fn(x) for x in items]``, spread over up to ``workers`` threads when that pays.

    Serial when threads cannot start: at interpreter exit (the exporter's last flush runs
    from atexit, where Python refuses new threads) or when the process is out of them. A
    pool per call: a process that forks must not inherit a pool whose threads are gone.
    """
    if workers < 2 or len(items) < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="otel-assay-lake") as pool:
        futures = []
        for x in items:
            try:
                futures.append(pool.submit(fn, x))
            except RuntimeError:  # "cannot schedule new futures after interpreter shutdown", "can't start new thread"
                futures.append(None)
        return [fn(x) if f is None else f.result() for f, x in zip(futures, items)]


def _write_files(jobs: list[tuple[pa.Table, Path]], *, fsync: bool, unique_names: bool) -> None:
    """Write each (rows, path), on a thread per core for a large write (Arrow's encoding
    releases the GIL).

    With ``unique_names`` (no caller token) a failure removes the files this write made, so
    a retry of the same rows (the exporter's, under new names) cannot store them twice. With
    a caller's token the names may be those of an earlier write of the same rows (WAL
    replay, re-import), which must stay; a retry under the same token replaces its files.
    """
    workers = pa.cpu_count() if sum(rows.num_rows for rows, _ in jobs) >= _PARALLEL_ROWS else 1
    try:
        _in_threads(lambda job: write_parquet_atomic(*job, fsync=fsync), jobs, workers)
    except BaseException:
        if unique_names:
            for _, path in jobs:
                path.unlink(missing_ok=True)
        raise


def _one_array(col: pa.ChunkedArray) -> pa.Array:
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _same_in_every_row(arr: pa.Array) -> bool:
    """Whether every row holds the same value (or is null), so that any order of the rows
    writes the same column. Typical batches have one service, scope, run and resource; not
    moving those columns saved ~30 % of the take on the benchmark. Floats are left out
    (0.0 == -0.0 but the bits differ)."""
    n = len(arr)
    if arr.null_count == n:
        return True
    if arr.null_count or not arr[0].equals(arr[n - 1]) or not arr[0].equals(arr[n // 2]):
        return False
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_integer(t):
        return pc.all(pc.equal(arr, arr[0])).as_py()
    if not (pa.types.is_map(t) and pa.types.is_string(t.key_type) and pa.types.is_string(t.item_type)):
        return False
    # all maps equal <=> all have the first map's length and the flat entries repeat with that period
    offsets = arr.offsets.to_numpy()
    width = int(offsets[1] - offsets[0])
    if not (np.diff(offsets) == width).all():
        return False
    if width == 0:
        return True
    for child in (arr.keys, arr.items):  # unsliced children: cut out this array's entries
        flat = child.slice(int(offsets[0]), n * width)
        if flat.null_count or not pc.all(pc.equal(flat.slice(width), flat.slice(0, (n - 1) * width))).as_py():
            return False
    return True


def _take(table: pa.Table, order: np.ndarray) -> pa.Table:
    """``table.take(order)``, leaving out columns that read the same in any order and spreading
    the rest over threads (Arrow takes them one by one)."""
    indices = pa.array(order)

    def take(col: pa.ChunkedArray) -> pa.Array:
        arr = _one_array(col)
        return arr if _same_in_every_row(arr) else arr.take(indices)

    workers = min(4, pa.cpu_count()) if table.num_rows >= _PARALLEL_ROWS else 1
    columns = _in_threads(take, table.columns, workers)
    return pa.Table.from_arrays(columns, schema=table.schema)


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
        """Write buffered rows as one file per table and ``dt=`` partition (several files of
        whole traces, ``part-<token>-<i>of<n>.parquet``, past ``FILE_ROWS`` rows).

        ``token`` names the files (``part-<token>.parquet``); writing the same rows with the
        same token again replaces the file with identical content, which makes WAL replay
        and re-import idempotent. Without a token the name is unique, and a write that fails
        removes the files it had written, so that its rows can be written again.
        """
        unique_names = not token
        token = _safe_token(token) if token else time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:16]
        result = WriteResult()
        jobs: list[tuple[pa.Table, Path]] = []  # (rows, file): encoded together at the end
        for name, table in tables.items():
            if table.num_rows == 0:
                result.rows[name] = 0
                continue
            days = _days(table.column("start_time_unix_nano" if name == "spans" else PARTITION_TIME))
            if PARTITION_TIME in table.schema.names:
                table = table.drop_columns([PARTITION_TIME])
            table = table.replace_schema_metadata(SCHEMA_METADATA)
            one_day = days.min() == days.max()
            # one sort by (day, keys) and contiguous slices, instead of a filter and a sort per day
            order = _sort_order(table, SORT_KEYS[name], None if one_day else days)
            if order is not None:
                table = _take(table, order)
                days = days[order]
            elif any(c.num_chunks > 1 for c in table.columns):
                # the file's bytes (page boundaries) depend on chunking; WAL replay must rewrite
                # the same file whatever batches the rows came back in
                table = table.combine_chunks()
            if one_day:
                parts = [(days[0], table)]
            else:
                starts = np.flatnonzero(np.diff(days)) + 1
                bounds = [0, *starts.tolist(), len(days)]
                parts = [(days[a], table.slice(a, b - a)) for a, b in zip(bounds, bounds[1:])]
            for day, part in parts:
                pdir = self.root / name / _dt_name(day)
                pdir.mkdir(parents=True, exist_ok=True)
                files = _file_slices(part)
                for i, rows in enumerate(files):
                    suffix = f"-{i + 1}of{len(files)}" if len(files) > 1 else ""
                    jobs.append((rows, pdir / f"part-{token}{suffix}.parquet"))
            result.rows[name] = table.num_rows
        _write_files(jobs, fsync=fsync, unique_names=unique_names)
        result.files.extend(path for _, path in jobs)
        return result

    # ------------------------------------------------------------------ reading
    def _records(self) -> list[dict]:
        out = []
        for entry in sorted(list_dir(self.compaction_dir), key=lambda e: e.name):
            if entry.name.startswith(".") or not entry.name.endswith(".json"):
                continue
            p = Path(entry.path)
            try:
                rec = json.loads(p.read_text())
            except FileNotFoundError:  # a compaction finished it since the listing
                continue
            except OSError as e:
                # unread, the files it replaces would be read beside their merged copy: every
                # row of them twice
                raise LakeError(cannot_read(p, e)) from None
            except (ValueError, RecursionError):
                continue
            if isinstance(rec, dict):  # a record of another shape is not ours: ignored like a damaged one
                rec["_path"] = p
                out.append(rec)
        return out

    def live_files(self, table: str = "spans") -> list[Path]:
        """The Parquet files a reader should read now (see the module docstring).

        A directory of the table that cannot be listed is a LakeError naming it, never a
        partition left out (see :func:`list_dir`)."""
        files = [Path(f.path) for part in list_dir(self.table_dir(table)) if _is_partition(part)
                 for f in list_dir(Path(part.path)) if f.name.endswith(".parquet") and not f.name.startswith(".")]
        files.sort()
        hidden = self.replaced_files(table, set(files))
        return [p for p in files if p not in hidden]

    def replaced_files(self, table: str, present: set[Path]) -> set[Path]:
        """The files of ``table`` that a merged file in ``present`` replaces: read together
        with it, their rows would be there twice."""
        tdir = self.table_dir(table)
        hidden: set[Path] = set()
        for rec in self._records():
            if rec.get("table") != table:
                continue
            pdir = tdir / str(rec.get("partition", ""))
            if (pdir / str(rec.get("new", ""))) in present:
                hidden.update(pdir / old for old in rec.get("old", []))
        return hidden

    # ------------------------------------------------------------------ compaction
    def compact(self, *, target_bytes: int = 256 << 20, grace_seconds: float = 60.0) -> "CompactResult":
        """Merge each partition's small files, dropping duplicate spans. Safe while readers read.

        One compaction at a time per lake (:class:`LakeBusy` otherwise): two that merged the
        same files would each publish a merged copy, and readers would see every row twice.
        """
        if not any(self.table_dir(t).is_dir() for t in TABLES):
            # creating spans/ etc. in a directory that is not a lake (a typo, LAKE/spans) would
            # only hide the mistake behind "compacted 0 files"
            raise LakeError(f"{self.root} is not a span lake (no spans/ directory); point --dir at the "
                            "directory that `otel-assay collect --dir` or OTEL_ASSAY_DIR names")
        self.ensure_writable()
        lock = self.compaction_lock()
        try:
            return self._compact(target_bytes, grace_seconds)
        finally:
            lock.close()  # releases the lock

    def compaction_lock(self):
        """Hold the lake's compaction lock until the returned file is closed (LakeBusy if
        another process holds it): one process at a time rewrites the lake's files."""
        self.compaction_dir.mkdir(exist_ok=True)
        return exclusive_lock(self.compaction_dir / "LOCK", LakeBusy(
            f"another otel-assay compact is running on {self.root}; let it finish "
            "(run one compaction per lake at a time)"))

    def _remove_leftovers(self) -> None:
        """Delete the temporary files of compactions that died before publishing them: a
        whole merged copy each, hidden from readers and otherwise never removed. Only
        compaction writes these names, and it holds the lock, so none is in use."""
        for table in TABLES:
            for part in list_dir(self.table_dir(table)):
                if _is_partition(part):
                    for f in list_dir(Path(part.path)):
                        if f.name.startswith((".part-compact-", "..part-compact-")):
                            Path(f.path).unlink(missing_ok=True)
        for f in list_dir(self.compaction_dir):
            if f.name.startswith(".") and f.name.endswith(".json.tmp"):
                Path(f.path).unlink(missing_ok=True)

    def _settled(self, files: list[Path]) -> list[Path]:
        """``files`` without those of write-ahead log segments still on disk. A collector that
        died after writing a segment's Parquet files but before deleting the segment replays it
        at start, rewriting files of those names: merged away meanwhile, their spans would be
        stored twice. Listed after the files: a segment is created before its files, so one
        gone by now was finished, and its files are safe to merge."""
        # listed or an error: a segment not seen would have its files merged, then replayed
        segments = {e.name[:-4] for e in list_dir(self.wal_dir) if e.name.startswith("seg-") and e.name.endswith(".wal")}
        if not segments:
            return files
        return [f for f in files if not ((m := _SEGMENT_FILE_RE.match(f.name)) and m.group(1) in segments)]

    def _compact(self, target_bytes: int, grace_seconds: float) -> "CompactResult":
        import duckdb  # imported here: see duckdb_connect, agents that only write never pay it

        result = CompactResult()
        result.deleted_files += self._finish_records(grace_seconds)
        self._remove_leftovers()
        con = duckdb_connect()
        try:
            for table in TABLES:
                tdir = self.table_dir(table)
                live = self._settled(self.live_files(table))
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
                        try:
                            before, after = self._compact_group(con, table, tdir / partition, group)
                        except duckdb.Error:
                            # a file whose footer reads but whose data does not: leave it, merge the rest
                            bad = {f: why for f in group if (why := _data_problem(con, f))}
                            if not bad:
                                raise
                            result.skipped.extend(f"{f}: {why}" for f, why in bad.items())
                            group = [f for f in group if f not in bad]
                            if len(group) < 2:
                                continue
                            before, after = self._compact_group(con, table, tdir / partition, group)
                        result.files_in += len(group)
                        result.files_out += 1
                        result.rows_in += before
                        result.rows_out += after
        finally:
            con.close()
        result.deleted_files += self._finish_records(grace_seconds)
        return result

    def _compact_group(self, con, table: str, pdir: Path, group: list[Path]) -> tuple[int, int]:
        schema = TABLES[table]
        cols = ", ".join(f'"{c}"' for c in schema.names)
        # Duplicates come from retransmitted OTLP batches and re-imports: the same span
        # (trace_id, span_id), or a copy of its event or link, which is equal in every column.
        # Not fewer columns: events of one span that share a name and a time (n choices
        # stamped at once, events without a time) differ only in their attributes, and were
        # merged into one and counted as duplicates.
        distinct = {
            "spans": "trace_id, span_id",
            "span_events": "trace_id, span_id, time_unix_nano, name, attributes, dropped_attributes_count",
            "span_links": "trace_id, span_id, linked_trace_id, linked_span_id, trace_state, attributes, "
                          "dropped_attributes_count",
        }[table]
        order = ", ".join(k for k, _ in SORT_KEYS[table])
        files_sql = sql_list(group)
        before = con.execute(f"SELECT count(*) FROM read_parquet({files_sql}, union_by_name=true)").fetchall()[0][0]
        present = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet({files_sql}, union_by_name=true)").fetchall()]
        merged = con.sql(
            f"SELECT DISTINCT ON ({distinct}) {cols} FROM (SELECT *{missing_columns_sql(schema, present)} "
            f"FROM read_parquet({files_sql}, union_by_name=true)) ORDER BY {order}"
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
        fsync_dir(self.compaction_dir)
        os.replace(tmp, pdir / new_name)
        fsync_dir(pdir)
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
                for tmp in list_dir(pdir):
                    if tmp.name.startswith(f".{new}."):
                        Path(tmp.path).unlink(missing_ok=True)
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


def _data_problem(con, path: Path) -> str | None:
    """Why ``path``'s rows cannot be read in full (corrupt pages), or None."""
    import duckdb  # imported here: see duckdb_connect, agents that only write never pay it

    # the relation read as an Arrow stream (its __arrow_c_stream__): one batch at a time, with
    # the same call on every DuckDB this package supports; a page DuckDB cannot decode fails
    # the stream with DuckDB's message, raised by Arrow or by DuckDB depending on where it broke
    try:
        for _ in pa.RecordBatchReader.from_stream(con.sql("SELECT * FROM read_parquet(?)", params=[str(path)])):
            pass
    except (duckdb.Error, pa.ArrowException) as e:
        return f"unreadable data ({str(e).splitlines()[0][:200]})"
    return None


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
    return inspect_lake_file(path, table)[1]


def parquet_schema(path: Path) -> tuple[pa.Schema | None, str | None]:
    """The Parquet schema of ``path``, or None and why it cannot be read."""
    meta, problem = _parquet_metadata(path)
    return (None if meta is None else meta.schema.to_arrow_schema()), problem


def _parquet_metadata(path: Path) -> tuple[pq.FileMetaData | None, str | None]:
    try:
        return pq.read_metadata(path), None
    except (OSError, pa.ArrowException, UnicodeError) as e:  # UnicodeError: a name that is not UTF-8
        return None, f"not a readable Parquet file ({str(e).splitlines()[0][:200]})"


def inspect_lake_file(path: Path, table: str = "spans") -> tuple[pa.Schema | None, str | None, int]:
    """The Parquet schema of ``path`` (None if unreadable), why it cannot be read as a lake
    file of ``table`` (None if it can), and the uncompressed size of its data as its footer records it
    (about what its rows take in memory)."""
    meta, problem = _parquet_metadata(path)
    if problem:
        return None, problem, 0
    schema = meta.schema.to_arrow_schema()
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if STEP_FILE_KEY in (schema.metadata or {}):
        return schema, ("a step file (a span file's stored steps, LAKE/steps/), not a spans file; "
                        "give the lake directory or the files under LAKE/spans"), size
    missing = REQUIRED_COLUMNS[table] - set(schema.names)
    if missing:
        return schema, f"not an otel-assay {table} file (missing columns: {', '.join(sorted(missing))})", size
    return schema, None, size
