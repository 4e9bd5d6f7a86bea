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
    path: Path
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
        self._lock_file = files.exclusive_lock(self.dir / "LOCK", WALLocked(
            f"another otel-assay collect is using this lake ({self.dir} is locked); "
            "run one collector per lake, or give this one its own --dir"))
        self.fsync = fsync
        self._cv = threading.Condition()
        self._queue: list[tuple[bytes, dict[str, pa.Table], int]] = []
        self._failed: dict[int, Exception] = {}
        self._next = 1
        self._done = 0
        self._writing = False
        self._open_segment()

    def existing_segments(self) -> list[Path]:
        return sorted(p for p in self.dir.glob("seg-*.wal") if p != self._segment.path)

    def _open_segment(self) -> None:
        name = f"seg-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:12]}.wal"
        path = self.dir / name
        self._file = open(path, "ab", buffering=0)
        self._segment = Segment(path)
        if self.fsync:
            # the file's fsync at each append makes its data durable, not its name: without
            # the directory's, a power loss can drop the whole segment of acknowledged batches
            files.fsync_dir(self.dir)  # looked up on the module: tests count the calls

    def append(self, tables: dict[str, pa.Table], spans: int) -> None:
        """Make ``tables`` (holding ``spans`` spans) durable; return only when they are fsynced
        (raise WALError if not)."""
        payload = encode(tables)
        record = _HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload
        with self._cv:
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
                self._cv.release()
                error = None
                try:
                    start = f.tell()
                    try:
                        _write_all(f, b"".join(r for r, _t, _n in group))
                        if self.fsync:
                            os.fsync(f.fileno())
                    except OSError as e:
                        error = e
                        try:  # take the torn bytes back so later records stay readable
                            f.truncate(start)
                            f.seek(start)
                        except OSError:
                            pass
                finally:
                    self._cv.acquire()
                if error is None:
                    for _r, t, n in group:
                        segment.tables.append(t)
                        segment.spans += n
                        segment.rows += sum(table.num_rows for table in t.values())
                else:
                    for s in range(first, last + 1):
                        self._failed[s] = error
                self._done = last
                self._writing = False
                self._cv.notify_all()
            err = self._failed.pop(seq, None)
        if err is not None:
            raise WALError(f"write-ahead log {self.dir} is not writable: {err}")

    def seal(self) -> Segment:
        """Close the current segment and start a new one; the caller flushes the sealed one."""
        with self._cv:
            while self._writing:
                self._cv.wait()
            sealed = self._segment
            self._file.close()
            self._open_segment()
            return sealed

    @property
    def buffered_rows(self) -> int:
        return self._segment.rows

    def close(self) -> None:
        with self._cv:
            while self._writing:
                self._cv.wait()
            self._file.close()
        self._lock_file.close()  # releases the lock

