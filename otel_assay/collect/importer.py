"""``otel-assay import``: OTLP trace files into the lake.

Reads what the OpenTelemetry Collector's file exporter and the SDK's OTLP JSON file
exporter write (reference/storage.md §3): JSON Lines (one ExportTraceServiceRequest or
TracesData per line), a single JSON document (or several, pretty-printed one after
another), or length-prefixed protobuf (4-byte big-endian length before each message); any
of them gzip- or zstd-compressed (detected by magic bytes, not by the file name), and
length-prefixed zstd-compressed JSON or protobuf messages (the Collector file exporter's
``compression: zstd``). Also one bare protobuf ExportTraceServiceRequest with no length
before it, as OTLP/HTTP carries it (``curl --data-binary``) and as opentelemetry-proto's
example file holds it; the import says which of the two protobuf framings it read.

Import is idempotent: files written for an input are named after the input's content
hash, so importing the same file twice leaves the lake as importing it once; and a file
read to its end (bad lines and a damaged compressed tail included: the same bytes never
give more) that gave any spans is recorded in ``LAKE/_imports/<hash>.json``, so that the
same content is skipped even after ``compact`` has merged (and renamed) the files it
produced. A fixed file, or one the Collector has appended to, is new content: its spans
that were already imported are stored again (the import counts them and says so), and
``compact`` drops such duplicates.

Speed: a JSON record is read by the fast path of ``fastjson`` when it is plain, by
``json.loads`` and ``otlp.add_json`` otherwise; a protobuf record by the receiver's
``compiled.protobuf_batch`` (the compiled decoder, or the generated classes for a request it
declines). Both give the same rows either way. Several files can be read at once by a pool of
processes (``jobs``), each writing its own files; a large JSON Lines file is read as ranges of
whole lines (``RANGE_BYTES`` each), in order by one process or at once by a pool, with the
same lake files either way. A file is read in chunks of ``CHUNK_SPANS`` spans, written as
each fills, so memory is bounded by a chunk.
"""

from __future__ import annotations

import errno
import gc
import gzip
import hashlib
import io
import itertools
import json
import os
import re
import struct
import sys
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, NamedTuple

import pyarrow as pa
import zstandard

from ..lake.files import Lake, LakeError, duckdb_connect, sql_list
from . import workers
from .compiled import protobuf_batch
from .fastjson import add_json_record
from .otlp import MalformedOTLP, add_json, add_protobuf, parse_json, parse_protobuf
from .workers import Progress
from ..lake.rows import SpanBatch
from ..lake.schema import DEFAULT_LIMITS, EMPTY_TABLES, Limits

CHUNK_SPANS = 200_000
# The largest record read whole: a protobuf message, a JSON line or a JSON document. Each is
# held in memory (several times over once parsed), so this bounds the importer's memory
# whatever a file claims or decompresses to; the Collector writes records of a few MiB.
MAX_RECORD = 256 << 20
# Decompressed bytes read from one compressed file by default (`--max-decompressed-mib`): a
# zstd file expands up to ~32,000 times, so a few hundred KiB can stand for gigabytes that
# would take minutes to read. A compressed Collector export rotated at its default 100 MiB
# expands to about this much.
MAX_DECOMPRESSED = 1 << 30
# Spans read from one file by default (`--max-spans`). A busy service exports tens of millions
# of spans a day, and the Collector's file exporter rotates its file long before that (every
# 100 MiB: a few hundred thousand spans), so a genuine file stays well under it; a hostile
# one (billions of spans of a few bytes each, which an uncompressed file on a large disk can
# hold) would otherwise fill the lake and take hours to read.
MAX_SPANS = 100_000_000
# Bytes of input per worker process when files are imported in parallel: a worker costs about
# 0.6 s of CPU to start (its imports), what importing 30 MiB of OTLP JSON takes, so a few
# small files are imported in this process.
BYTES_PER_WORKER = 32 << 20
# With ``jobs`` above 1, an uncompressed JSON Lines file of at least two of these is read as
# byte ranges of whole lines, one worker task each, so that one large export (the Collector
# rotates its file at 100 MiB; a day's export may be one file of gigabytes) uses every core.
# The ranges depend on the file alone, not on ``jobs``: a range's lake files are named after
# the file's content and the range, so an interrupted import run again replaces them.
RANGE_BYTES = 32 << 20
_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"


@dataclass
class FileReport:
    path: str
    format: str = "?"
    spans_seen: int = 0
    spans_imported: int = 0
    spans_rejected: int = 0
    errors: list[str] = field(default_factory=list)
    reject_reasons: dict[str, int] = field(default_factory=dict)
    already_imported: str | None = None  # the record of an earlier import of the same content, if any
    stopped_at_limit: bool = False  # reading stopped at a limit (decompressed size, spans): the rest is unread
    spans_already_in_lake: int | None = None  # imported spans the lake held before (None: not checked)


@dataclass
class ImportResult:
    files: list[FileReport] = field(default_factory=list)

    @property
    def spans_imported(self) -> int:
        return sum(f.spans_imported for f in self.files)

    @property
    def spans_rejected(self) -> int:
        return sum(f.spans_rejected for f in self.files)

    @property
    def ok(self) -> bool:
        return all(not f.errors and not f.spans_rejected for f in self.files)


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:20]


class _Counting(io.RawIOBase):
    """Reports bytes read from the file on disk (compressed), for the progress bar; reads at
    most ``limit`` bytes (a range of the file) when one is given."""

    def __init__(self, f: BinaryIO, tick: Progress | None, limit: int | None = None):
        self.f, self.tick, self.left = f, tick, limit

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.left is not None:
            b = memoryview(b)[:self.left]
        n = self.f.readinto(b)
        if self.left is not None:
            self.left -= n
        if self.tick and n:
            self.tick(n, 0)
        return n

    def close(self) -> None:
        self.f.close()
        super().close()


class CorruptCompressed(Exception):
    """The compressed stream broke off or is damaged; what was decompressed before it is good."""


class DecompressedLimit(Exception):
    """The file decompresses to more than the limit; what was read before it is good."""


class SpanLimit(Exception):
    """The file holds more spans than the limit; the spans read before it are good."""


class RecordTooLong(Exception):
    """A record longer than MAX_RECORD: reading the file stops there (the records before it are good)."""


class _Decompressed(io.RawIOBase):
    """Turns a decompressor's errors into :class:`CorruptCompressed`.

    gzip reports damage as EOFError, zlib.error or BadGzipFile, an OSError like a failing
    disk: told apart here, where they arise, the importer can keep the spans read before the
    damage and still let a real read error through.
    """

    def __init__(self, inner, kind: str, errors: tuple[type[BaseException], ...], limit: int):
        self.inner, self.kind, self.errors, self.limit = inner, kind, errors, limit
        self.produced = 0  # decompressed bytes so far, for the message and the limit

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            # readinto1, one decompression step: readinto would loop to fill ``b`` and lose
            # what it had decompressed when the damage is reached
            n = self.inner.readinto1(b)
        except self.errors as e:
            raise CorruptCompressed(f"corrupt or truncated {self.kind} file: {e} "
                                    f"(after {self.produced} bytes of decompressed data)") from None
        self.produced += n
        if self.produced > self.limit:
            raise DecompressedLimit(f"the {self.kind} file decompresses to more than {self.limit >> 20} MiB; "
                                    "the spans before that were imported: if the file is genuine, import it again "
                                    "with a higher --max-decompressed-mib")
        return n

    def close(self) -> None:
        self.inner.close()
        super().close()


def _open_decompressed(path: Path, progress, limit: int) -> tuple[io.BufferedReader, str]:
    f = open(path, "rb", buffering=0)
    head = f.read(4)
    f.seek(0)
    raw = io.BufferedReader(_Counting(f, progress), 1 << 20)
    if head[:2] == _GZIP:
        # BadGzipFile (a bad header or CRC) is an OSError, but not a failing read
        gz = _Decompressed(gzip.GzipFile(fileobj=raw), "gzip", (EOFError, zlib.error, gzip.BadGzipFile), limit)
        return io.BufferedReader(gz, 1 << 20), "gzip"
    if head == _ZSTD:
        zst = _Decompressed(_ZstdFrames(raw), "zstd", (zstandard.ZstdError,), limit)
        return io.BufferedReader(zst, 1 << 20), "zstd"
    return raw, ""


class _ZstdFrames(io.RawIOBase):
    """zstd frames one after another, and an error when the file ends inside a frame.

    zstandard's ``stream_reader`` ends quietly where the input ends: a file cut off at a
    block boundary (a copy of one the Collector is still writing flushes whole blocks) read
    as complete, imported with exit 0 and was recorded as imported. gzip reports the same
    cut; here a ``decompressobj`` per frame tells by its ``eof`` whether the frame was whole.
    """

    STEP = 8 << 10  # compressed bytes per call: zstd expands at most ~32,000x, so at most ~256 MiB out

    def __init__(self, raw: BinaryIO):
        self.raw, self.dctx, self.frame = raw, zstandard.ZstdDecompressor(), None
        self.out, self.pos = b"", 0  # decompressed, not yet handed out

    def readable(self) -> bool:
        return True

    def readinto1(self, b) -> int:
        while self.pos == len(self.out):
            rest = b""
            if self.frame is not None and self.frame.eof:
                rest, self.frame = self.frame.unused_data, None  # the next frame's first bytes
            data = rest or self.raw.read(self.STEP)
            if not data:
                if self.frame is not None:
                    raise zstandard.ZstdError("the data ends inside a zstd frame")
                return 0
            if self.frame is None:
                self.frame = self.dctx.decompressobj()
            self.out, self.pos = self.frame.decompress(data), 0
        n = min(len(b), len(self.out) - self.pos)
        b[:n] = self.out[self.pos:self.pos + n]
        self.pos += n
        return n

    readinto = readinto1

    def close(self) -> None:
        self.raw.close()
        super().close()


def _protobuf_records(stream: BinaryIO) -> Iterator[bytes]:
    while True:
        head = stream.read(4)
        if not head:
            return
        if len(head) < 4:
            raise MalformedOTLP("truncated length prefix at end of file")
        (n,) = struct.unpack(">I", head)
        if n > MAX_RECORD:
            raise MalformedOTLP(f"record length {n} is implausible")
        if n == 0:  # no exporter writes an empty message; a file of zero bytes is billions of them
            raise MalformedOTLP("record length 0 (a run of zero bytes?)")
        body = stream.read(n)
        if len(body) < n:
            raise MalformedOTLP("truncated record at end of file")
        yield body


@dataclass
class Inputs:
    """What ``import`` reads: the files named, and the files directly in each directory named."""

    files: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "path: why", for each path that cannot be listed or stat'ed
    skipped: list[str] = field(default_factory=list)  # "path: why", for each entry of a directory not read


def expand_inputs(args: list[str | Path], lake_dir: str | Path) -> Inputs:
    """The files to import for the paths given on the command line.

    A directory (named, or matched by a shell glob among files) stands for the files directly
    in it, in name order: the Collector's file exporter rotates its file into the same
    directory, and a subdirectory may hold anything (an archive, a lake), so it is not
    entered but named in a note. Hidden files (an editor's swap file, a writer's temporary
    file) and files that are clearly not span exports (Parquet, text, empty) are skipped with
    a note; a file named on its own is always read, and reported if it is not OTLP. A
    directory that is the lake or inside it is skipped whole: its files are the lake's own.
    """
    lake = Path(lake_dir).resolve()
    out, seen = Inputs(), set()

    def add(path: Path) -> None:
        key = path.resolve()
        if key not in seen:  # a file named and also in a directory named: read once
            seen.add(key)
            out.files.append(path)

    for arg in args:
        path = Path(arg)
        try:
            is_file, is_dir = path.is_file(), path.is_dir()
        except OSError as e:  # a directory above it that cannot be searched
            out.unreadable.append(f"{e.filename or arg}: {e.strerror or e}")
            continue
        if is_file:
            add(path)
        elif not is_dir:
            out.missing.append(str(arg))
        elif path.resolve() == lake or lake in path.resolve().parents:
            out.skipped.append(f"{path}: skipped, it is the lake --dir (or inside it): its files are the lake's own")
        else:
            try:
                # listed or an error: a file left out in silence would be an import of part of the exports
                with os.scandir(path) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as e:
                out.unreadable.append(f"{arg}: {e.strerror or e}")
                continue
            for entry in entries:
                child = Path(entry.path)
                try:
                    is_dir = not entry.name.startswith(".") and entry.is_dir()
                except OSError as e:  # a link into a directory that cannot be searched
                    out.unreadable.append(f"{child}: {e.strerror or e}")
                    continue
                if entry.name.startswith("."):
                    why = "hidden"
                elif is_dir:
                    why = ("the lake --dir" if child.resolve() == lake else
                           "a directory (import reads the files directly in a directory; name it to read its files)")
                elif not entry.is_file():
                    why = "not a regular file"
                else:
                    why = _not_span_export(child)
                if why:
                    out.skipped.append(f"{child}: skipped, {why}")
                else:
                    add(child)
    return out


def _not_span_export(path: Path) -> str | None:
    """Why a file found in a directory is clearly not a span export; None when it may be one."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return None  # the import says why it cannot be read
    if not head:
        return "empty"
    if head[:4] == b"PAR1":
        return "a Parquet file (a lake's own files are read with `otel-assay sql`, not imported)"
    if head[:2] == _GZIP or head[:4] == _ZSTD:
        return None
    if head[:3] == _BOM:
        head = head[3:]
    if head.lstrip(b" \t\r\n")[:1] in (b"{", b"["):
        return None
    # length-prefixed protobuf: a plausible length, then field 1 of ExportTraceServiceRequest
    # (0x0a) or a zstd-compressed message; text, images and archives start otherwise
    if len(head) >= 4 and struct.unpack(">I", head[:4])[0] <= MAX_RECORD and head[4:5] in (b"", b"\x0a", _ZSTD[:1]):
        return None
    if _bare_message_start(head):
        return None
    return "neither OTLP JSON nor OTLP protobuf (nor gzip or zstd)"


def _varint(data: bytes, i: int) -> tuple[int, int] | None:
    """The protobuf varint at ``data[i:]`` and the index after it; None when ``data`` ends
    inside it or it is longer than any length field."""
    value = shift = 0
    while i < len(data) and shift < 64:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            return value, i
        shift += 7
    return None


# The tags of ResourceSpans' fields (resource, scope_spans, schema_url: field numbers 1-3,
# wire type 2), each with the tags its message's first field can have: Resource's
# attributes, dropped_attributes_count, entity_refs; ScopeSpans' scope, spans, schema_url
# (schema_url is text, anything)
_RESOURCE_SPANS_FIELDS = {0x0A: (0x0A, 0x10, 0x1A), 0x12: (0x0A, 0x12, 0x1A), 0x1A: None}


def _bare_message_start(head: bytes) -> bool:
    """Whether a file starting with ``head`` starts as one bare ExportTraceServiceRequest
    (or TracesData, the same bytes): the tag of field 1 (0x0a), the first ResourceSpans'
    length, and within it only ResourceSpans' own fields, each of a length that fits and
    each message starting with one of its own fields, ending exactly where that length says
    (or running past ``head``).

    The walk, not the first byte alone, because 0x0a is also a newline and a length of 91 or
    123 is "[" or "{": a message can begin as JSON text does ("\\n{\\n  ..."), and text
    starting with blank lines begins as a message does; neither keeps to the fields (an
    indented JSON key starts with a space or a quote, no field's tag). As a length prefix
    the same first byte would announce a record of 160 MiB or more, which no exporter writes.
    """
    if head[:1] != b"\x0a":
        return False
    got = _varint(head, 1)
    if got is None:
        return True  # the file (or head) ends in the first length: the import says what is wrong
    length, i = got
    end = i + length
    while i < min(end, len(head)):
        if head[i] not in _RESOURCE_SPANS_FIELDS:
            return False
        first_fields = _RESOURCE_SPANS_FIELDS[head[i]]
        got = _varint(head, i + 1)
        if got is None:
            return True
        n, i = got
        if first_fields and n and i < len(head) and head[i] not in first_fields:
            return False
        i += n
    return i <= end  # short of the end only where ``head`` ends; past it, a field overran its message


def import_files(
    paths: list[str | Path],
    lake_dir: str | Path,
    *,
    limits: Limits = DEFAULT_LIMITS,
    progress: Progress | None = None,
    max_decompressed: int = MAX_DECOMPRESSED,
    max_spans: int = MAX_SPANS,
    jobs: int = 1,
) -> ImportResult:
    """Import OTLP trace files into the lake at ``lake_dir``; bad records are reported, good
    ones kept. A compressed file is read up to ``max_decompressed`` bytes, and any file up to
    the record that takes it past ``max_spans`` spans.

    With ``jobs`` above 1, files are read by that many processes at once, each writing its
    own files into the lake (their names come from the content, as in one process), and a
    large JSON Lines file by several of them, range by range (see :func:`_line_ranges`).
    Files of the same content are read one after the other by one process, so that the
    second is skipped as imported before, as it is when the files are read in order. The
    lake's files, the reports and the ledger are those of one process."""
    lake = Lake(lake_dir)
    lake.ensure_writable()
    paths = [Path(p) for p in paths]
    options = (str(lake_dir), limits, max_decompressed, max_spans)
    work = _parallel_work(paths, lake, jobs)
    if work is None:
        outcomes = _import_group(paths, *options, progress=progress)
    else:
        tasks = [(task, *options) for _, group_tasks in work for task in group_tasks]
        jobs = min(jobs, len(tasks), max(1, _size(paths) // BYTES_PER_WORKER))
        done = iter(workers.run(_work, tasks, jobs, progress, counters=len(paths)))
        outcomes: list = [None] * len(paths)
        for group, group_tasks in work:
            results = [next(done) for _ in group_tasks]
            if isinstance(group_tasks[0], _RangeTask):
                path, plan = paths[group[0]], group_tasks[0].plan
                report = FileReport(str(path), format="json")
                files, complete = _join(report, results, max_spans)
                if complete:
                    _remember(lake, plan.digest, report)
                outcomes[group[0]] = (report, files)
                continue
            (files,) = results
            if isinstance(files, workers.Lost):
                # its process died (the out-of-memory killer, a signal) or never ran after one
                # did: no ledger entry, so importing the file again reads it whole
                files = [(FileReport(str(paths[i]), errors=[_LOST]), []) for i in group]
            for i, outcome in zip(group, files):
                outcomes[i] = outcome
    result = ImportResult([report for report, _ in outcomes])
    # once for the whole run: a check after each file read every other file of its
    # partitions again, so a directory of N small exports cost N² file reads (300 files of
    # 48 spans: 45 s of checks after 5 s of import)
    _count_already_in_lake(lake, [(report, files) for report, files in outcomes if files])
    return result


def _size(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:  # its import says why
            pass
    return total


def _same_content_groups(paths: list[Path]) -> list[list[int]]:
    """The inputs as groups to read one after the other, in input order: files of the same
    content together, every other file on its own. Only files of the same size are hashed."""
    by_size: dict[int, list[int]] = {}
    groups: list[list[int]] = []
    for i, path in enumerate(paths):
        try:
            by_size.setdefault(path.stat().st_size, []).append(i)
        except OSError:  # its import says why
            groups.append([i])
    for same_size in by_size.values():
        by_digest: dict[str, list[int]] = {}
        for i in same_size:
            try:
                key = _digest(paths[i]) if len(same_size) > 1 else ""
            except OSError:
                groups.append([i])
                continue
            by_digest.setdefault(key, []).append(i)
        groups.extend(by_digest.values())
    return sorted(groups)


_LOST = ("not imported: the process reading it ended abruptly (killed, perhaps out of memory; try fewer --jobs); "
         "import it again")


class _Range(NamedTuple):
    """The lines of a file in bytes ``[start, end)``, the first of them line ``first_line``."""

    start: int
    end: int
    first_line: int


class _Ranges(NamedTuple):
    """A JSON Lines file cut into line ranges: its content hash (the ledger's key), what it
    was when it was hashed (device, inode, size, modification time: a range read from a
    file rotated or appended to since would not be of that content), and its ranges."""

    digest: str
    identity: tuple[int, int, int, int]
    ranges: list[_Range]


class _RangeTask(NamedTuple):
    """A pool's task: one range of a file, counting its spans in the pool's ``counter``."""

    path: str
    plan: _Ranges
    range: _Range
    counter: int


class _Part(NamedTuple):
    """What reading one range gave: its report, the spans files it wrote, the top-level keys
    of its documents that are not OTLP, and whether it read the range to its end (or to the
    span limit)."""

    report: FileReport
    files: list[Path]
    foreign: set[str]
    complete: bool


def _parallel_work(paths: list[Path], lake: Lake, jobs: int) -> list[tuple[list[int], list]] | None:
    """The tasks for a pool of ``jobs`` processes, by group of inputs: the group's indices
    and its tasks: ``("files", paths)``, read one after the other, or one :class:`_RangeTask`
    per range of a file larger than its share of the input (a large file among small ones,
    or a single file). None when a pool does not pay: one process, or less to read than a
    worker costs to start. Files of the same content are one group."""
    total = _size(paths)
    if jobs <= 1 or total < 2 * BYTES_PER_WORKER:
        return None
    work: list[tuple[list[int], list]] = []
    for group in _same_content_groups(paths):
        path = paths[group[0]]
        plan = _line_ranges(path) if len(group) == 1 and _size([path]) * jobs > total else None
        if plan is None or _ledger(lake, plan.digest).exists():  # imported before: its task says so
            work.append((group, [("files", [str(paths[i]) for i in group])]))
        else:
            work.append((group, [_RangeTask(str(path), plan, r, group[0]) for r in plan.ranges]))
    return work


def _line_ranges(path: Path) -> _Ranges | None:
    """An uncompressed JSON Lines file of at least two ``RANGE_BYTES`` as ranges of whole
    lines, each starting at the first line that starts at or after a multiple of
    ``RANGE_BYTES``; None for any other file.

    Such a file is always read range by range, in one process as in a pool, so that its
    lake files (named after the file's content and each range) and its report are the same
    whichever reads it, and an import run again after an interruption replaces what the
    first wrote. JSON Lines as the whole-file reader decides it: the first line that is not
    blank is a whole JSON document (else the file is one document, or several over many
    lines, which cannot be cut at a line). A file with a line longer than a record may be is
    read whole too (reading stops at that line). One pass over the file gives its hash and
    its ranges."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size < 2 * RANGE_BYTES:
                return None
            head = f.read(1 << 16)
            if head.startswith(_BOM):
                head = head[3:]
            if (head[:2] == _GZIP or head[:4] == _ZSTD or _bare_message_start(head)
                    or head.lstrip(b" \t\r\n")[:1] not in (b"{", b"[")):
                return None
            f.seek(0)
            stream = io.BufferedReader(f, 1 << 20)
            if stream.peek(3)[:3] == _BOM:
                stream.read(3)
            while (line := stream.readline(MAX_RECORD + 1)) and not line.strip():
                pass
            try:
                json.loads(line)
            except (ValueError, RecursionError):  # also a line longer than a record may be
                return None
            f.seek(0)
            digest = hashlib.sha256()
            ranges: list[_Range] = []
            start, first_line = 0, 1
            pos = newlines = 0
            last_newline = -1
            target = RANGE_BYTES
            # blocks no longer than a record, so that a line longer than one spans two blocks
            while block := f.read(min(1 << 20, MAX_RECORD)):
                digest.update(block)
                first_nl = block.find(b"\n")
                # an overlong line: one process stops there, so every reader must (the length
                # from newline to newline, measured where a line crosses into a new block)
                if (pos + first_nl if first_nl >= 0 else pos + len(block)) - last_newline > MAX_RECORD:
                    return None
                while target <= pos + len(block):
                    j = block.find(b"\n", max(target - 1 - pos, 0))
                    if j < 0:  # the line goes on in the next block
                        break
                    cut = pos + j + 1  # the start of the line after that newline
                    if cut < st.st_size:
                        ranges.append(_Range(start, cut, first_line))
                        start, first_line = cut, newlines + block.count(b"\n", 0, j + 1) + 1
                    target = (cut // RANGE_BYTES + 1) * RANGE_BYTES  # past a line longer than a range
                if first_nl >= 0:
                    last_newline = pos + block.rfind(b"\n")
                newlines += block.count(b"\n")
                pos += len(block)
            if pos - last_newline > MAX_RECORD or pos != st.st_size:
                return None  # an overlong last line, or the file grew while it was hashed
    except OSError:  # its import says why
        return None
    ranges.append(_Range(start, pos, first_line))
    if len(ranges) < 2:
        return None
    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    return _Ranges(digest.hexdigest()[:20], identity, ranges)


def _work(task, lake_dir: str, limits: Limits, max_decompressed: int, max_spans: int):
    """A pool's task: files read one after the other, or one range of a file."""
    if isinstance(task, _RangeTask):
        return _import_range(Path(task.path), task.plan, task.range, Lake(lake_dir), limits, max_spans,
                             workers.worker_progress, lambda n: workers.add_count(task.counter, n))
    return _import_group([Path(p) for p in task[1]], lake_dir, limits, max_decompressed, max_spans)


def _import_range(path: Path, plan: _Ranges, rng: _Range, lake: Lake, limits: Limits, max_spans: int,
                  progress, count: Callable[[int], int]) -> _Part:
    """Import the lines of one range of ``path`` (``count`` counts the file's spans, for the
    span limit). Its lake files are named after the file's content and the range's start."""
    report, foreign = FileReport(str(path), format="json"), set()

    def read(stream: io.BufferedReader, batch_ref, record_done) -> None:
        if rng.start == 0 and stream.peek(3)[:3] == _BOM:
            stream.read(3)
        _add_json_lines(_bounded_lines(stream, rng.first_line), batch_ref=batch_ref, record_done=record_done,
                        report=report, foreign=foreign, first_line=rng.first_line)

    complete = False
    try:
        f = open(path, "rb", buffering=0)
        try:
            st = os.fstat(f.fileno())
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != plan.identity:
                f.close()
                report.errors.append("the file changed while it was imported (rotated, appended to or replaced); "
                                     "import it again once it is complete")
                return _Part(report, [], foreign, False)
            f.seek(rng.start)
        except OSError:
            f.close()
            raise
        counting = _Counting(f, progress, rng.end - rng.start)
        files = _read_into_lake(io.BufferedReader(counting, 1 << 20), f"import-{plan.digest}-at{rng.start}", lake,
                                limits, report, progress, max_spans, read, count=count)
        complete = counting.left == 0 or report.stopped_at_limit
    except OSError as e:
        report.errors.append(_os_error(e, path))
        files = []
    if workers.in_worker():
        workers.flush_progress()
    return _Part(report, files, foreign, complete)


def _os_error(e: OSError, path: Path) -> str:
    """What failed, the input file or the lake: a full disk is not a bad input."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS) or (e.filename and str(e.filename) != str(path)):
        return (f"cannot write the lake: {e.strerror or e}; free space or fix its permissions and import again "
                "(nothing of this file was recorded as imported)")
    return f"cannot read: {e.strerror or e}"


def _join(report: FileReport, parts: list, max_spans: int) -> tuple[list[Path], bool]:
    """Fill ``report`` with what the ranges of one file gave (in file order; a part may be a
    :class:`workers.Lost`); return the spans files written and whether every range was read
    to its end, the condition for the ledger. Line errors are kept up to 100, as one reader
    of the whole file keeps them."""
    files, foreign, line_errors, other = [], set(), [], []
    complete = True
    for part in parts:
        if isinstance(part, workers.Lost):
            other.append("part of the file was not imported: the process reading it ended abruptly (killed, "
                         "perhaps out of memory; try fewer --jobs); import it again")
            complete = False
            continue
        r = part.report
        report.spans_seen += r.spans_seen
        report.spans_imported += r.spans_imported
        report.spans_rejected += r.spans_rejected
        for why, n in r.reject_reasons.items():
            report.reject_reasons[why] = report.reject_reasons.get(why, 0) + n
        report.stopped_at_limit |= r.stopped_at_limit
        for e in r.errors:
            (line_errors if e.startswith("line ") else other).append(e)
        files += part.files
        foreign |= part.foreign
        complete &= part.complete
    if report.stopped_at_limit:
        other = [e for e in other if not e.startswith("the file holds more than")] + [_span_limit(max_spans)]
    report.errors = line_errors[:100] + list(dict.fromkeys(other))
    _no_otlp_error(report, foreign)
    return files, complete


def _import_group(paths: list[Path], lake_dir: str, limits: Limits, max_decompressed: int, max_spans: int,
                  progress: Progress | None = None) -> list[tuple[FileReport, list[Path]]]:
    """Import files one after the other: each one's report and the spans files it wrote. In a
    worker process (no ``progress`` given), progress goes to the parent."""
    in_worker = progress is None and workers.in_worker()
    tick = workers.worker_progress if in_worker else progress
    lake = Lake(lake_dir)
    out = []
    for path in paths:
        report = FileReport(str(path))
        try:
            files = _import_one(path, lake, limits, report, tick, max_decompressed, max_spans)
        except OSError as e:
            report.errors.append(_os_error(e, path))
            files = []
        out.append((report, files))
    if in_worker:
        workers.flush_progress()
    return out


def _ledger(lake: Lake, digest: str) -> Path:
    return lake.root / "_imports" / f"{digest}.json"


def _record_import(lake: Lake, digest: str, report: FileReport) -> None:
    """Remember a file whose import ran to its end: its spans are in the lake under whatever names."""
    path = _ledger(lake, digest)
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")  # two imports of one file may race
    tmp.write_text(json.dumps({"file": report.path, "format": report.format, "spans_imported": report.spans_imported,
                               "spans_rejected": report.spans_rejected,
                               "imported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
    os.replace(tmp, path)


def _import_one(path: Path, lake: Lake, limits: Limits, report: FileReport, progress,
                max_decompressed: int, max_spans: int) -> list[Path]:
    """Import one file; return the spans files written for it. A large JSON Lines file is
    read range by range, as a pool reads it."""
    plan = _line_ranges(path)
    digest = plan.digest if plan is not None else _digest(path)
    try:
        before = json.loads(_ledger(lake, digest).read_text())
    except (OSError, ValueError):
        before = None
    if isinstance(before, dict):
        report.format = str(before.get("format", "?"))
        report.already_imported = str(_ledger(lake, digest))
        return []
    if plan is not None:
        report.format = "json"
        seen = [0]

        def count(n: int) -> int:
            seen[0] += n
            return seen[0]

        parts = [_import_range(path, plan, r, lake, limits, max_spans, progress, count) for r in plan.ranges]
        written, complete = _join(report, parts, max_spans)
        if complete:
            _remember(lake, digest, report)
        return written
    # an OSError (reading the file or writing the lake failed) propagates and nothing is
    # recorded: the same content may import fully later
    written = _import_stream(path, digest, lake, limits, report, progress, max_decompressed, max_spans)
    _remember(lake, digest, report)
    return written


def _remember(lake: Lake, digest: str, report: FileReport) -> None:
    """Record the import of a file read to its end.

    Recorded even with bad lines or a corrupt compressed tail: the same bytes can never
    import more than they just did, and importing them again after a compaction would
    store the good spans twice. Not a file nothing of which was imported (not OTLP, empty,
    unreadable from its first byte): importing it again cannot store anything twice, and a
    record would make the next run call it "imported before" and exit 0 with none of it in
    the lake, even once the file is readable (or otel-assay reads its format). Nor a file
    read only up to a limit (decompressed size, spans): with a higher one, its rest imports."""
    if (report.spans_imported or not (report.errors or report.spans_rejected)) and not report.stopped_at_limit:
        _record_import(lake, digest, report)


# Above this many bytes of files in the partitions an import wrote to, the check for spans
# stored twice is skipped: it is a notice, and must not cost more than the import did.
DUPLICATE_CHECK_MAX_BYTES = 2 << 30


def _count_already_in_lake(lake: Lake, written: list[tuple[FileReport, list[Path]]]) -> None:
    """Set each report's ``spans_already_in_lake``: how many of its spans the lake already
    held under other files, from before this run or from a file imported earlier in it.

    A file the Collector has appended to since it was last imported is new content (the
    ledger goes by hash), so all its earlier spans are stored again. Copies of a span land in
    the same ``dt=`` partition (by start time), so only the files of the partitions this run
    wrote to are read, and only their two id columns, in one query. Left None when the check
    was skipped (too much to read, or the lake could not be read): it is a notice, not part
    of the import.
    """
    if not written:
        return
    source = {f: i for i, (_, files) in enumerate(written) for f in files}  # file -> input, in import order
    partitions = {f.parent for f in source}
    try:
        others = [f for f in lake.live_files("spans") if f.parent in partitions and f not in source]
    except LakeError:  # a notice only: the lake's readers report what cannot be read
        return
    if not others and len(written) == 1:
        written[0][0].spans_already_in_lake = 0
        return
    files = sorted(source) + others
    try:
        # this run's files too: the one query reads them all
        if sum(f.stat().st_size for f in files) > DUPLICATE_CHECK_MAX_BYTES:
            return
    except OSError:  # compacted away meanwhile
        return

    import duckdb  # here: an import into a new partition needs no DuckDB, and it costs 0.06 s to load

    con = duckdb_connect()
    try:
        # the lake's earlier files are input -1: a span counts for an input when an earlier
        # input (or the lake before) holds it, as when each file was checked after its import
        con.register("sources", pa.table({"filename": [str(f) for f in files],
                                          "src": [source.get(f, -1) for f in files]}))
        counts = dict(con.execute(
            f"WITH r AS (SELECT p.trace_id, p.span_id, s.src FROM read_parquet({sql_list(files)}, filename = true) p "
            f"JOIN sources s ON p.filename = s.filename) "
            f"SELECT a.src, count(*) FROM (SELECT DISTINCT trace_id, span_id, src FROM r WHERE src >= 0) a "
            f"WHERE EXISTS (SELECT 1 FROM r b WHERE b.trace_id = a.trace_id AND b.span_id = a.span_id "
            f"AND b.src < a.src) GROUP BY a.src").fetchall())
    except duckdb.Error:  # an unreadable file is reported by compact and the views, not by this notice
        return
    finally:
        con.close()
    for i, (report, _) in enumerate(written):
        report.spans_already_in_lake = counts.get(i, 0)


def _import_stream(path: Path, digest: str, lake: Lake, limits: Limits, report: FileReport,
                   progress, max_decompressed: int, max_spans: int) -> list[Path]:
    """Read one file into the lake, whatever its format; return the spans files written."""
    stream, compression = _open_decompressed(path, progress, max_decompressed)
    suffix = f"+{compression}" if compression else ""

    def read(stream: io.BufferedReader, batch_ref, record_done) -> None:
        if stream.peek(3)[:3] == _BOM:
            stream.read(3)  # Windows tools write UTF-8 JSON with a BOM; it is not a length prefix
        # the whole buffer, not a few bytes: JSON may start after many blank lines
        window = stream.peek(1 << 16)
        first = window.lstrip(b" \t\r\n")
        if _bare_message_start(window):  # before JSON: a message may start with "\n{"
            report.format = "protobuf" + suffix
            _import_bare(stream, batch_ref=batch_ref, record_done=record_done, report=report, suffix=suffix)
        elif first[:1] in (b"{", b"["):
            report.format = "json" + suffix
            _import_json(stream, batch_ref=batch_ref, record_done=record_done, report=report)
        elif stream.peek(1):
            report.format = "protobuf" + suffix
            _import_protobuf(stream, batch_ref=batch_ref, record_done=record_done, report=report)
        else:
            report.errors.append("empty file")

    return _read_into_lake(stream, f"import-{digest}", lake, limits, report, progress, max_spans, read,
                           compression=compression)


def _span_limit(max_spans: int) -> str:
    return (f"the file holds more than {max_spans} spans; the spans before that were imported: if the file is "
            "genuine, import it again with a higher --max-spans")


def _read_into_lake(stream: io.BufferedReader, token: str, lake: Lake, limits: Limits, report: FileReport,
                    progress, max_spans: int, read: Callable, *, compression: str = "",
                    count: Callable[[int], int] | None = None, rest: str = "the rest of the file was not read",
                    ) -> list[Path]:
    """Run ``read(stream, batch_ref, record_done)`` and write its rows into the lake a chunk
    at a time, as files named ``part-<token>-<chunk>``; return the spans files written. The
    stream is closed. A damaged compressed tail, a limit or an overlong record ends the
    reading with an error in ``report``; the spans read before it are written.

    ``count(n)`` is told of each record's ``n`` spans and returns the spans the file has
    given so far (by default this reader's), which the span limit applies to."""
    chunk = 0
    rows = _Chunk(limits)
    written: list[Path] = []
    told = [0, 0]  # spans given to ``progress`` and ``count``; the file's spans so far

    def flush() -> None:
        nonlocal chunk, rows
        tables = rows.tables()
        if len(rows):
            result = lake.write(tables, token=f"{token}-{chunk:05d}")
            written.extend(f for f in result.files if f.parent.parent.name == "spans")
            report.spans_imported += len(rows)
            chunk += 1
        for why, n in rows.reject_reasons.items():
            report.reject_reasons[why] = report.reject_reasons.get(why, 0) + n
        report.spans_rejected += rows.rejected
        rows = _Chunk(limits)
        if collect_garbage:
            gc.collect()

    def record_done() -> None:
        """After each record (a protobuf message, a JSON line or document): write a full chunk
        (memory stays bounded), and stop past the span limit. Checked per record, so the
        spans of the record that passes it are imported with those before."""
        new = report.spans_seen - told[0]
        if new:
            told[0] = report.spans_seen
            if progress is not None:
                progress(0, new)
            told[1] = report.spans_seen if count is None else count(new)
        if len(rows) >= CHUNK_SPANS:
            flush()
        if told[1] > max_spans:
            raise SpanLimit(_span_limit(max_spans))

    # The collector's automatic passes find nothing here (the rows hold no reference cycles)
    # but scan every object a chunk holds, again and again as it grows: a third of the CPU of
    # a JSON import. Paused while the file is read, and run once per chunk written instead.
    collect_garbage = gc.isenabled()
    gc.disable()
    try:
        try:
            if count is not None and count(0) > max_spans:  # a range after the file passed it
                raise SpanLimit(_span_limit(max_spans))
            read(stream, lambda: rows, record_done)
        except CorruptCompressed as e:
            if report.format == "?":
                report.format = compression
            report.errors.append(f"{e}; " + (
                "the spans before the damage were imported; copy or export the file again for the rest"
                if report.spans_seen else "no spans could be read; copy or export the file again"))
        except (DecompressedLimit, SpanLimit) as e:
            report.format = report.format if report.format != "?" else compression
            report.stopped_at_limit = True
            report.errors.append(str(e))
        except RecordTooLong as e:
            report.errors.append(f"{e}; {rest}")
        flush()  # after a damaged tail too: the spans read before it are good
    finally:
        if collect_garbage:  # first: a close that raises must not leave the caller's process without it
            gc.enable()
        stream.close()
    return written


class _Chunk:
    """The rows read since the last write, in the order they were read: a
    :class:`~otel_assay.lake.rows.SpanBatch` that JSON and the simple protobuf path append to,
    and the tables of records the compiled protobuf decoder read."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.batch = SpanBatch(limits)
        self.pieces: list[dict[str, pa.Table]] = []
        self.n = 0  # spans in ``pieces``
        self.rejected = 0
        self.reject_reasons: dict[str, int] = {}

    def __len__(self) -> int:
        return self.n + len(self.batch)

    def add(self, rows) -> None:
        """Append a request's rows read on their own (a CompiledBatch, or a SpanBatch)."""
        if len(rows) or rows.rejected:
            self._close_batch()
            self._take(rows)

    def _take(self, batch) -> None:
        if len(batch):
            self.pieces.append(batch.tables())
            self.n += len(batch)
            if len(self.pieces) >= MAX_PIECES:
                # a file of many small requests (an SDK exporter writes one per batch, often
                # of one span) kept three small tables per request, about 40 KiB each, until
                # the chunk was written: memory grew with the requests, not the spans
                self.pieces = [self._merged()]
        for why, n in batch.reject_reasons.items():
            self.reject_reasons[why] = self.reject_reasons.get(why, 0) + n
        self.rejected += batch.rejected

    def _close_batch(self) -> None:
        if len(self.batch) or self.batch.rejected:
            self._take(self.batch)
            self.batch = SpanBatch(self.limits)

    def tables(self) -> dict[str, pa.Table]:
        self._close_batch()
        if len(self.pieces) == 1:
            return self.pieces[0]
        return self._merged()

    def _merged(self) -> dict[str, pa.Table]:
        return {name: pa.concat_tables([p[name] for p in self.pieces if p[name].num_rows] or [empty]).combine_chunks()
                for name, empty in EMPTY_TABLES.items()}


# pieces (requests read on their own) a chunk holds before merging them into one
MAX_PIECES = 256
# protobuf records shorter than this go to the chunk's shared batch by the simple path
SMALL_RECORD = 4096


_BOM = b"\xef\xbb\xbf"


# Records in a row that hold no span before the rest of a file is given up: exporters write a
# message only when they have spans, and tiny empty messages (a few bytes each) would
# otherwise keep the importer busy for minutes per decompressed GiB.
MAX_EMPTY_RECORDS = 1000


def _import_protobuf(stream: BinaryIO, *, batch_ref, record_done, report: FileReport) -> None:
    n = 0
    empty = 0
    try:
        for n, record in enumerate(_protobuf_records(stream), 1):
            before = report.spans_seen
            try:
                if record[:4] == _ZSTD:
                    # the Collector's file exporter with `compression: zstd` (its default,
                    # message-level mode) compresses each length-prefixed message on its own,
                    # JSON (`format: json`) or protobuf: the file itself starts with a length
                    record = _unzstd_record(record)
                    if n == 1 and record[:1] == b"{":
                        report.format = report.format.replace("protobuf", "json")
                    if n == 1 and "+zstd" not in report.format:
                        report.format += "+zstd"
                # JSON starts with "{"; a serialized ExportTraceServiceRequest with the tag of
                # field 1 (0x0a), and never with 0x7b (field 15, a group)
                if record[:1] == b"{":
                    seen = add_json_record(record, batch_ref().batch)
                    report.spans_seen += add_json(parse_json(record), batch_ref().batch) if seen is None else seen
                elif len(record) < SMALL_RECORD:
                    # a small request (an SDK exporter writes one per batch, often of one
                    # span) costs more as tables of its own than its spans cost in the
                    # chunk's shared batch: 40,000 one-span records took 8.4 s of CPU that way
                    # against 1.0 s through the simple path
                    report.spans_seen += add_protobuf(parse_protobuf(record), batch_ref().batch)
                else:
                    # the receiver's entry: the compiled decoder, or the simple path for a
                    # request it declines
                    rows, seen = protobuf_batch(record, batch_ref().limits, sys.maxsize)
                    batch_ref().add(rows)
                    report.spans_seen += seen
            except MalformedOTLP as e:
                report.errors.append(f"record {n}: {e}")
            empty = empty + 1 if report.spans_seen == before else 0
            if empty >= MAX_EMPTY_RECORDS:
                raise MalformedOTLP(f"{MAX_EMPTY_RECORDS} records in a row hold no span")
            record_done()
    except MalformedOTLP as e:
        if n == 0:
            # the first length prefix is already wrong: most likely not protobuf at all (a
            # log, CSV, Zipkin...), so say what the file would have to be
            report.format = report.format.replace("protobuf", "unknown")
            report.errors.append(
                f"neither OTLP JSON (which starts with {{ or [) nor length-prefixed OTLP protobuf ({e}) nor a bare "
                "ExportTraceServiceRequest (which starts with byte 0x0a); export traces with the OpenTelemetry Collector's file exporter or an OTLP file exporter")
        else:
            report.errors.append(f"after record {n}: {e}; the rest of the file is unreadable")


def _import_bare(stream: BinaryIO, *, batch_ref, record_done, report: FileReport, suffix: str) -> None:
    """A file that starts as a bare message: tried as length-prefixed records first (a first
    record of 160 MiB or more, which would start with the same byte), then as one message."""
    data = stream.read(MAX_RECORD + 1)
    if len(data) > MAX_RECORD:
        raise RecordTooLong(f"a bare protobuf message longer than {MAX_RECORD >> 20} MiB, more than any OTLP export")
    try:
        whole = sum(len(r) + 4 for r in _protobuf_records(io.BytesIO(data))) == len(data)
    except MalformedOTLP:
        whole = False
    if whole:
        _import_protobuf(io.BytesIO(data), batch_ref=batch_ref, record_done=record_done, report=report)
        return
    report.format = "protobuf (one bare message, no length prefix)" + suffix
    try:
        rows, seen = protobuf_batch(data, batch_ref().limits, sys.maxsize)
    except MalformedOTLP as e:
        report.errors.append(
            "neither length-prefixed OTLP protobuf nor a bare ExportTraceServiceRequest: the file starts as a "
            f"bare message but does not parse as one ({e}); was it cut off? export or copy it again")
        return
    batch_ref().add(rows)
    report.spans_seen += seen
    record_done()


def _unzstd_record(record: bytes) -> bytes:
    """One zstd-compressed record, at most MAX_RECORD bytes decompressed (a record is read whole)."""
    frames, body, buf = _ZstdFrames(io.BytesIO(record)), bytearray(), memoryview(bytearray(1 << 20))
    try:
        while n := frames.readinto1(buf):
            body += buf[:n]
            if len(body) > MAX_RECORD:
                raise MalformedOTLP(f"zstd-compressed record decompresses to more than {MAX_RECORD} bytes")
    except zstandard.ZstdError as e:
        raise MalformedOTLP(f"corrupt zstd-compressed record: {e}") from None
    return bytes(body)


def _import_json(stream: BinaryIO, *, batch_ref, record_done, report: FileReport) -> None:
    foreign: set[str] = set()  # top-level keys of documents that are not OTLP
    _import_json_docs(stream, batch_ref=batch_ref, record_done=record_done, report=report, foreign=foreign)
    _no_otlp_error(report, foreign)


def _no_otlp_error(report: FileReport, foreign: set[str]) -> None:
    """Valid JSON, but not OTLP (a Jaeger or Zipkin export, a report): saying "0 spans
    imported" and succeeding would hide that nothing of it can be analysed."""
    if report.spans_seen or report.errors or not foreign:
        return
    if {"context", "start_time", "end_time"} <= foreign:  # span.to_json(), as ConsoleSpanExporter writes
        report.errors.append(
            "no OTLP spans: this is the OpenTelemetry SDK's ConsoleSpanExporter output (span.to_json()), which "
            "is not OTLP; write spans with the OTLP JSON file exporter (package opentelemetry-exporter-otlp-json-file, "
            "FileSpanExporter) or send them to `otel-assay collect`")
        return
    report.errors.append(
        "no OTLP spans: the JSON has no resourceSpans (its top-level keys: " + ", ".join(sorted(foreign)[:8]) +
        "); export OTLP/JSON, for example with the OpenTelemetry Collector's file exporter")


def _note_foreign(doc, foreign: set[str]) -> None:
    if isinstance(doc, dict) and "resourceSpans" not in doc and "resource_spans" not in doc:
        foreign.update(str(k)[:40] for k in list(doc)[:20])


def _bounded_lines(stream: BinaryIO, first_line: int = 1) -> Iterator[bytes]:
    """The lines of ``stream``, each read with a bound: iterating a stream reads a line
    whole however long it is, and one line of a decompressed bomb is gigabytes."""
    n = first_line - 1
    while line := stream.readline(MAX_RECORD + 1):
        n += 1
        if len(line) > MAX_RECORD:
            raise RecordTooLong(f"line {n} is longer than {MAX_RECORD >> 20} MiB, more than any OTLP export line")
        yield line


def _import_json_docs(stream: BinaryIO, *, batch_ref, record_done, report: FileReport, foreign: set[str]) -> None:
    lines = _bounded_lines(stream)
    skipped = b""  # leading blank lines: neither a document nor a bad line
    first_line = b""
    for line in lines:
        if line.strip():
            first_line = line
            break
        skipped += line
    try:
        json.loads(first_line)
    except (ValueError, RecursionError):
        # one (pretty-printed) document, or JSON Lines whose first line is cut off or bad
        text = skipped + first_line + stream.read(MAX_RECORD + 1)
        if len(text) > MAX_RECORD:
            raise RecordTooLong(f"a JSON document longer than {MAX_RECORD >> 20} MiB, more than any OTLP export")
        seen = add_json_record(text, batch_ref().batch)
        if seen is not None:
            report.spans_seen += seen
            record_done()
            return
        try:
            doc = json.loads(text)
            docs = doc if isinstance(doc, list) else [doc]
        except (ValueError, RecursionError) as e:
            found = _concatenated(text)
            if found is None:
                # not one document either: read line by line, so that one bad line (a record cut
                # off by a crash, a stray log line) costs that line and not the whole file
                errors = len(report.errors)
                good = _add_json_lines(io.BytesIO(text), batch_ref=batch_ref,
                                       record_done=record_done, report=report, foreign=foreign)
                if not good:  # a broken document, not JSON Lines: one error, not one per line
                    del report.errors[errors:]
                    report.errors.append(f"not valid JSON: {e}")
                return
            docs, damage = found
            report.errors.extend(damage)
        for d in docs:
            _note_foreign(d, foreign)
            try:
                report.spans_seen += add_json(d, batch_ref().batch)
            except MalformedOTLP as e:
                report.errors.append(str(e))
            record_done()  # many documents one after another: as JSON Lines
        return
    docs = itertools.chain([b""] * skipped.count(b"\n"), [first_line], lines)
    _add_json_lines(docs, batch_ref=batch_ref, record_done=record_done, report=report, foreign=foreign)


def _concatenated(text: bytes) -> tuple[list, list[str]] | None:
    """The documents of ``text`` when it is several JSON documents one after another, each
    over many lines: ``jq . traces.jsonl`` pretty-prints each line's document so, and the
    SDK's ConsoleSpanExporter writes its spans so. Neither one document nor JSON Lines, such
    a file was refused whole as "not valid JSON: Extra data". Also returns an error for each
    damaged document: a copy of a file still being written ends inside its last document,
    which cost every complete document before it. None when no document is whole.
    """
    decoder, docs, errors, whole, i = json.JSONDecoder(), [], [], 0, 0
    try:
        s = text.decode("utf-8")
    except UnicodeDecodeError:
        return None
    while True:
        while i < len(s) and s[i] in " \t\r\n":  # raw_decode takes no whitespace before a document
            i += 1
        if i == len(s):
            return (docs, errors) if whole else None
        try:
            doc, i = decoder.raw_decode(s, i)
        except (ValueError, RecursionError) as e:
            why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
            # a document starts on a line of its own, with an unindented { or [: go on there
            nxt = _DOC_START.search(s, i + 1)
            if len(errors) < 100:  # as for JSON Lines; and each line number counts from the start
                line = s.count("\n", 0, i) + 1
                errors.append(
                    f"line {line}: not valid JSON ({why}); the document there is cut off or damaged (a copy of a "
                    "file still being written?): the documents before it were imported" if nxt is None else
                    f"line {line}: not valid JSON ({why}); the document there was skipped, reading went on at "
                    f"line {s.count(chr(10), 0, nxt.start() + 1) + 1}")
            if nxt is None:
                return (docs, errors) if whole else None
            i = nxt.start() + 1
            continue
        whole += 1
        docs.extend(doc if isinstance(doc, list) else [doc])


_DOC_START = re.compile(r"\n[{\[]")


def _add_json_lines(lines: Iterable[bytes], *, batch_ref, record_done, report: FileReport, foreign: set[str],
                    first_line: int = 1) -> int:
    """Add each line's document, the first of them line ``first_line`` of its file; return
    how many lines were valid JSON.

    A line goes to the fast path first (``fastjson``: the common, plain line), and to
    ``json.loads`` and ``add_json`` when the fast path declines it: the rows are the same."""
    good = 0
    for lineno, line in enumerate(lines, first_line):
        if not line or line.isspace():
            continue
        seen = add_json_record(line, batch_ref().batch)
        if seen is not None:
            good += 1
            report.spans_seen += seen
            record_done()
            continue
        try:
            item = json.loads(line)
        except UnicodeDecodeError:
            if len(report.errors) < 100:
                report.errors.append(f"line {lineno}: not UTF-8")
            continue
        except (ValueError, RecursionError) as e:
            if len(report.errors) < 100:
                report.errors.append(f"line {lineno}: not valid JSON ({e})")
            continue
        good += 1
        # a list of documents, as a whole file may be: on one line (json.dumps without
        # indent) it reads as JSON Lines, and was refused while the indented file imported
        for doc in item if isinstance(item, list) else [item]:
            _note_foreign(doc, foreign)
            try:
                report.spans_seen += add_json(doc, batch_ref().batch)
            except MalformedOTLP as e:
                if len(report.errors) < 100:
                    report.errors.append(f"line {lineno}: {e}")
        record_done()
    return good
