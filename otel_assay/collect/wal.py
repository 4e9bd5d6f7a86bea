"""The collector's write-ahead log: a batch is acknowledged only once it is here and fsynced.

Records are appended to the current segment file ``_wal/seg-<id>.wal``::

    b"OAW1" | u32 payload length | u32 crc32(payload) | payload

and the payload holds the batch's three tables (spans, span_events, span_links) as Arrow
IPC streams, each prefixed by its u32 length. Concurrent appends share one write and one
fsync (group commit), which is what lets a single core acknowledge tens of thousands of
spans per second durably.

The flusher seals the current segment (new appends go to a new one), writes the sealed
segment's rows to Parquet under the segment's own name, and only then deletes the segment
file. A crash at any point leaves either the segment (replayed at start, rewriting the
same Parquet file names) or the Parquet files, never neither. A torn record at the end of a
segment (a crash mid-write) was never acknowledged, and replay skips it. A torn record in
the middle (a failed write whose bytes could not be taken back; later appends go after it)
is skipped too, and the records after it are recovered: replay then keeps the segment in
``_wal/damaged/`` and says so.

When the log cannot take a record (a full disk, a read-only or vanished directory, its
segment file deleted or moved away), it says so in :attr:`WriteAheadLog.fault` and takes
no more until a :meth:`WriteAheadLog.seal` has opened a segment again and written a probe:
a batch is never acknowledged into a file that is no longer where replay would look.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from ..lake import files
from ..lake.schema import EMPTY_TABLES

MAGIC = b"OAW1"
# written and fsynced beside the log to learn whether it takes writes again after a fault:
# a new segment's name needs an inode, not space, so opening one proves too little
PROBE_BYTES = 64 * 1024
_HEADER = struct.Struct("<4sII")
_LEN = struct.Struct("<I")
TABLE_ORDER = ("spans", "span_events", "span_links")


class WALError(OSError):
    """The log could not be made durable; the batch was not acknowledged."""


def _ipc_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


# the empty tables of a batch without events or links, encoded once rather than per record
_EMPTY_STREAMS = {name: _ipc_stream(t) for name, t in EMPTY_TABLES.items()}


def encode(tables: dict[str, pa.Table]) -> bytes:
    parts = []
    for name in TABLE_ORDER:
        t = tables[name]
        buf = _EMPTY_STREAMS[name] if t is EMPTY_TABLES[name] else _ipc_stream(t)
        parts.append(_LEN.pack(len(buf)))
        parts.append(buf)
    return b"".join(parts)


def decode(payload: bytes) -> dict[str, pa.Table]:
    out = {}
    off = 0
    for name in TABLE_ORDER:
        (n,) = _LEN.unpack_from(payload, off)
        off += _LEN.size
        out[name] = pa.ipc.open_stream(pa.py_buffer(payload[off: off + n])).read_all()
        off += n
    return out


def read_segment(path: Path, skipped: list[tuple[int, int]] | None = None) -> Iterator[bytes]:
    """Yield the intact records of a segment, in order, each once.

    Bytes that are no intact record (a torn tail, or a torn record that could not be taken
    back, with records after it) are skipped: reading goes on at the next place where a
    record header starts whose payload checks out (a false one there would need its crc32
    to match by chance), and ``(offset, length)`` of each skipped run is added to ``skipped``.
    """
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    bad = None  # where the run of skipped bytes began
    while off < len(data):
        if off + _HEADER.size <= len(data):
            magic, n, crc = _HEADER.unpack_from(data, off)
            end = off + _HEADER.size + n
            if magic == MAGIC and end <= len(data) and zlib.crc32(data[off + _HEADER.size: end]) == crc:
                if bad is not None and skipped is not None:
                    skipped.append((bad, off - bad))
                bad = None
                yield data[off + _HEADER.size: end]
                off = end
                continue
        if bad is None:
            bad = off
        nxt = data.find(MAGIC, off + 1)
        off = len(data) if nxt < 0 else nxt
    if bad is not None and skipped is not None:
        skipped.append((bad, len(data) - bad))


def _write_all(f, data: bytes) -> None:
    # an unbuffered file's write() may write less (a disk filling up): a record must be
    # whole before its batch is acknowledged, or replay stops at it and loses what follows
    view = memoryview(data)
    while view:
        n = f.write(view)
        if not n:
            raise OSError(28, "no space left on device (short write)")
        view = view[n:]


@dataclass
class Segment:
    path: Path | None  # None: no file could be opened (the log is at fault), nothing in it
    tables: list[dict[str, pa.Table]] = field(default_factory=list)
    spans: int = 0
    # every row of the three tables: what the segment holds in memory. An event or link is a
    # row like a span (a span may carry 1,024 of each), so the collector's bound counts rows
    rows: int = 0

    @property
    def token(self) -> str:
        return self.path.stem  # "seg-<time>-<uuid>": the Parquet files of this segment reuse it


class WALLocked(WALError):
    """Another collector owns this log (it would replay and delete the other's live segment)."""


class WriteAheadLog:
    def __init__(self, directory: Path, *, fsync: bool = True):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = self._lock()
        self.fsync = fsync
        self._cv = threading.Condition()
        self._queue: list[tuple[bytes, dict[str, pa.Table], int]] = []
        self._failed: dict[int, Exception] = {}
        self._next = 1
        self._done = 0
        self._writing = False
        self._write_started: float | None = None  # when the group being written began
        # why the log takes no records now; set by a failed write, a failed open or check(),
        # cleared by the first seal() that opens a segment and writes a probe again
        self.fault: str | None = None
        self._probe_bytes = PROBE_BYTES  # the largest group that failed since the last healthy seal
        self._file = None
        self._segment = Segment(None)
        self._open_segment()

    def _lock(self):
        return files.exclusive_lock(self.dir / "LOCK", WALLocked(
            f"another otel-assay collect is using this lake ({self.dir} is locked); "
            "run one collector per lake, or give this one its own --dir"))

    def existing_segments(self) -> list[Path]:
        # listed so that an unreadable log is an error, not a log with nothing to replay
        return sorted(Path(e.path) for e in files.list_dir(self.dir)
                      if e.name.startswith("seg-") and e.name.endswith(".wal") and Path(e.path) != self._segment.path)

    def _open_segment(self) -> None:
        name = f"seg-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:12]}.wal"
        path = self.dir / name
        f = open(path, "ab", buffering=0)
        try:
            if self.fsync:
                # the file's fsync at each append makes its data durable, not its name: without
                # the directory's, a power loss can drop the whole segment of acknowledged batches
                files.fsync_dir(self.dir)  # looked up on the module: tests count the calls
        except OSError:
            f.close()
            path.unlink(missing_ok=True)
            raise
        self._file, self._segment = f, Segment(path)

    def _in_place(self) -> bool:
        """Whether the open segment is still the file at its path: one deleted, or moved away
        with its directory, would take acknowledged records where no replay finds them."""
        try:
            on_disk = os.stat(self._segment.path)
            held = os.fstat(self._file.fileno())
        except (OSError, ValueError):
            return False
        return (on_disk.st_ino, on_disk.st_dev) == (held.st_ino, held.st_dev)

    def _misplaced(self) -> str:
        try:
            gone = not self.dir.parent.is_dir()
        except OSError as e:  # EACCES, EIO, ESTALE: is_dir raises all but ENOENT/ENOTDIR/EBADF/ELOOP
            return f"the lake directory {self.dir.parent} cannot be looked up: {e}"
        if gone:
            return f"the lake directory {self.dir.parent} is gone (deleted, moved or unmounted)"
        return (f"the write-ahead log segment {self._segment.path} is gone (was {self.dir} deleted or moved?)")

    def append(self, tables: dict[str, pa.Table], spans: int) -> None:
        """Make ``tables`` (holding ``spans`` spans) durable; return only when they are fsynced
        (raise WALError if not, and set :attr:`fault`)."""
        payload = encode(tables)
        record = _HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload
        with self._cv:
            if self.fault is not None:
                raise WALError(self.fault)
            seq = self._next
            self._next += 1
            self._queue.append((record, tables, spans))
            while self._done < seq:
                if self._writing:
                    self._cv.wait()
                    continue
                self._writing = True
                group, self._queue = self._queue, []
                last = self._next - 1
                first = last - len(group) + 1
                segment, f = self._segment, self._file
                self._write_started = time.monotonic()
                self._cv.release()
                error = None
                try:
                    error = self._write_group(f, b"".join(r for r, _t, _n in group))
                except Exception as e:  # never leave _writing set: every later append and seal would wait
                    error = f"write-ahead log {self.dir} is not writable: {type(e).__name__}: {e}"
                finally:
                    self._cv.acquire()
                if error is None:
                    for _r, t, n in group:
                        segment.tables.append(t)
                        segment.spans += n
                        segment.rows += sum(table.num_rows for table in t.values())
                else:
                    self.fault = error
                    for s in range(first, last + 1):
                        self._failed[s] = error
                self._done = last
                self._writing = False
                self._write_started = None
                self._cv.notify_all()
            err = self._failed.pop(seq, None)
        if err is not None:
            raise WALError(err)

    def _write_group(self, f, data: bytes) -> str | None:
        """Append ``data`` to the open segment and fsync it; None, or why that failed (the
        torn bytes then taken back, so that later records stay readable)."""
        if f is None:
            return self.fault or f"no write-ahead log segment is open in {self.dir}"
        if not self._in_place():
            return self._misplaced()
        try:
            start = f.tell()
        except (OSError, ValueError) as e:
            return f"write-ahead log {self.dir} is not writable: {e}"
        try:
            _write_all(f, data)
            if self.fsync:
                os.fsync(f.fileno())
            if not self._in_place():  # deleted while it was written: acknowledge nothing
                return self._misplaced()
            return None
        except OSError as e:
            try:
                f.truncate(start)
                f.seek(start)
            except OSError:
                pass
            self._probe_bytes = max(self._probe_bytes, len(data))
            return f"write-ahead log {self.dir} is not writable: {e}"

    def write_waited_s(self) -> float | None:
        """For how long the group being written has waited for the disk (None: none is)."""
        started = self._write_started
        return None if started is None else time.monotonic() - started

    def seal(self) -> Segment:
        """Close the current segment and start a new one; the caller flushes the sealed one.

        This is also how the log recovers from a fault: the new segment must open, and after a
        fault a probe must be written and fsynced beside it, before :attr:`fault` clears. The
        sealed segment is returned either way: its records were acknowledged and are in memory
        even when its file is gone."""
        with self._cv:
            while self._writing:
                self._cv.wait()
            sealed = self._segment
            if self._file is not None:
                try:
                    self._file.close()
                except OSError:
                    pass
            self._file, self._segment = None, Segment(None)
            try:
                self._reopen_dir()
                if self.fault is not None:
                    self._probe()
                self._open_segment()
                self.fault = None
                self._probe_bytes = PROBE_BYTES
            except WALLocked as e:
                self.fault = str(e)
            except OSError as e:
                self.fault = f"write-ahead log {self.dir} is not writable: {e}"
            return sealed

    def _reopen_dir(self) -> None:
        """After the lake was deleted and made again: the log's directory and its lock again.
        The lake directory itself is never made here: a missing one may be an unmounted volume."""
        if not self.dir.parent.is_dir():
            raise OSError(f"the lake directory {self.dir.parent} is gone (deleted, moved or unmounted)")
        if not self.dir.is_dir():
            self.dir.mkdir()
            if self.fsync:
                files.fsync_dir(self.dir.parent)  # the new directory's name must survive a power loss too
        try:
            held = os.fstat(self._lock_file.fileno())
            on_disk = os.stat(self.dir / "LOCK")
            same = (held.st_ino, held.st_dev) == (on_disk.st_ino, on_disk.st_dev)
        except OSError:
            same = False
        if not same:  # the lock we hold is on a file that is gone: another collector could start
            lock = self._lock()
            self._lock_file.close()
            self._lock_file = lock

    def _probe(self) -> None:
        path = self.dir / f".probe-{uuid.uuid4().hex[:12]}"
        try:
            with open(path, "wb", buffering=0) as f:
                _write_all(f, bytes(self._probe_bytes))
                os.fsync(f.fileno())
        finally:
            path.unlink(missing_ok=True)

    def check(self) -> str | None:
        """Set :attr:`fault` if the log's segment or directory is gone; return the fault."""
        with self._cv:
            if self.fault is None and self._file is not None and not self._in_place():
                self.fault = self._misplaced()
            return self.fault

    @property
    def buffered_rows(self) -> int:
        return self._segment.rows

    def close(self) -> None:
        with self._cv:
            while self._writing:
                self._cv.wait()
            if self._file is not None:
                try:
                    if not self._segment.tables and self._in_place():
                        self._segment.path.unlink()  # its own last segment, empty: never another log's
                except OSError:
                    pass
                try:
                    self._file.close()
                except OSError:
                    pass
                self._file = None
        self._lock_file.close()  # releases the lock
