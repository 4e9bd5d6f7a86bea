"""``otel-assay import``: OTLP trace files into the lake.

Reads what the OpenTelemetry Collector's file exporter and the SDK's OTLP JSON file
exporter write (reference/storage.md §3): JSON Lines (one ExportTraceServiceRequest or
TracesData per line), a single JSON document, or length-prefixed protobuf (4-byte
big-endian length before each message); any of them gzip- or zstd-compressed (detected by
magic bytes, not by the file name).

Import is idempotent: files written for an input are named after the input's content
hash, so importing the same file twice leaves the lake as importing it once; and a file
read to its end (bad lines included) is recorded in ``LAKE/_imports/<hash>.json``, so that
the same content is skipped even after ``compact`` has merged (and renamed) the files it
produced. A fixed file is new content: its spans that were already imported are stored
again, and ``compact`` drops such duplicates.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import struct
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from .lake import Lake
from .otlp import MalformedOTLP, add_json, add_protobuf, parse_protobuf
from .schema import DEFAULT_LIMITS, Limits, SpanBatch

CHUNK_SPANS = 200_000
MAX_RECORD = 256 << 20
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
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:20]


class _Counting(io.RawIOBase):
    """Reports bytes read from the file on disk (compressed), for the progress bar."""

    def __init__(self, f: BinaryIO, tick: Callable[[int], None] | None):
        self.f, self.tick = f, tick

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.f.readinto(b)
        if self.tick and n:
            self.tick(n)
        return n

    def close(self) -> None:
        self.f.close()
        super().close()


def _open_decompressed(path: Path, progress) -> tuple[io.BufferedReader, str]:
    f = open(path, "rb", buffering=0)
    head = f.read(4)
    f.seek(0)
    raw = io.BufferedReader(_Counting(f, progress), 1 << 20)
    if head[:2] == _GZIP:
        return io.BufferedReader(gzip.GzipFile(fileobj=raw), 1 << 20), "gzip"
    if head == _ZSTD:
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)
        return io.BufferedReader(reader, 1 << 20), "zstd"
    return raw, ""


def _protobuf_records(stream: BinaryIO) -> Iterator[bytes]:
    while True:
        head = stream.read(4)
        if not head:
            return
        if len(head) < 4:
            raise MalformedOTLP("truncated length prefix at end of file")
        (n,) = struct.unpack(">I", head)
        if n > MAX_RECORD:
            raise MalformedOTLP(f"record length {n} is implausible; not a length-prefixed OTLP protobuf file")
        body = stream.read(n)
        if len(body) < n:
            raise MalformedOTLP("truncated record at end of file")
        yield body


def import_files(
    paths: list[str | Path],
    lake_dir: str | Path,
    *,
    limits: Limits = DEFAULT_LIMITS,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import OTLP trace files into the lake at ``lake_dir``; bad records are reported, good ones kept."""
    lake = Lake(lake_dir)
    lake.ensure_writable()
    result = ImportResult()
    for p in paths:
        path = Path(p)
        report = FileReport(str(path))
        result.files.append(report)
        try:
            _import_one(path, lake, limits, report, progress)
        except OSError as e:
            report.errors.append(f"cannot read: {e.strerror or e}")
    return result


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


def _import_one(path: Path, lake: Lake, limits: Limits, report: FileReport, progress) -> None:
    digest = _digest(path)
    try:
        before = json.loads(_ledger(lake, digest).read_text())
    except (OSError, ValueError):
        before = None
    if isinstance(before, dict):
        report.format = str(before.get("format", "?"))
        report.already_imported = str(_ledger(lake, digest))
        return
    try:
        _import_stream(path, digest, lake, limits, report, progress)
    except EOFError as e:
        report.errors.append(f"truncated compressed data: {e}")
    except OSError:
        raise  # reading the file or writing the lake failed: the same content may import fully later
    except Exception as e:  # a corrupt compressed stream raises library-specific errors
        if type(e).__module__.startswith(("zstd", "zlib", "gzip")) or "zstd" in type(e).__name__.lower():
            report.errors.append(f"corrupt compressed data: {e}")
        else:
            raise
    # recorded even with bad lines or a corrupt tail: the same bytes can never import more
    # than they just did, and importing them again after a compaction would store the good
    # spans twice
    _record_import(lake, digest, report)


def _import_stream(path: Path, digest: str, lake: Lake, limits: Limits, report: FileReport, progress) -> None:
    stream, compression = _open_decompressed(path, progress)
    chunk = 0
    batch = SpanBatch(limits)

    def flush() -> None:
        nonlocal chunk, batch
        if len(batch):
            lake.write(batch.tables(), token=f"import-{digest}-{chunk:05d}")
            report.spans_imported += len(batch)
            chunk += 1
        for why, n in batch.reject_reasons.items():
            report.reject_reasons[why] = report.reject_reasons.get(why, 0) + n
        report.spans_rejected += batch.rejected
        batch = SpanBatch(limits)

    try:
        first = stream.peek(64)[:64]
        looks_json = first.lstrip()[:1] in (b"{", b"[")
        if looks_json:
            report.format = "json" + (f"+{compression}" if compression else "")
            _import_json(stream, batch_ref=lambda: batch, flush=flush, report=report)
        elif first:
            report.format = "protobuf" + (f"+{compression}" if compression else "")
            try:
                for n, record in enumerate(_protobuf_records(stream), 1):
                    try:
                        report.spans_seen += add_protobuf(parse_protobuf(record), batch)
                    except MalformedOTLP as e:
                        report.errors.append(f"record {n}: {e}")
                    if len(batch) >= CHUNK_SPANS:
                        flush()
            except MalformedOTLP as e:
                report.errors.append(str(e))
        else:
            report.errors.append("empty file")
        flush()
    finally:
        stream.close()


def _import_json(stream: BinaryIO, *, batch_ref, flush, report: FileReport) -> None:
    foreign: set[str] = set()  # top-level keys of documents that are not OTLP
    _import_json_docs(stream, batch_ref=batch_ref, flush=flush, report=report, foreign=foreign)
    if report.spans_seen == 0 and not report.errors and foreign:
        # valid JSON, but not OTLP (a Jaeger or Zipkin export, a report): saying "0 spans
        # imported" and succeeding would hide that nothing of it can be analysed
        report.errors.append(
            "no OTLP spans: the JSON has no resourceSpans (its top-level keys: " + ", ".join(sorted(foreign)[:8]) +
            "); export OTLP/JSON, for example with the OpenTelemetry Collector's file exporter")


def _note_foreign(doc, foreign: set[str]) -> None:
    if isinstance(doc, dict) and "resourceSpans" not in doc and "resource_spans" not in doc:
        foreign.update(str(k)[:40] for k in list(doc)[:20])


def _import_json_docs(stream: BinaryIO, *, batch_ref, flush, report: FileReport, foreign: set[str]) -> None:
    lines = iter(stream)
    first_line = next(lines, b"")
    try:
        first_doc = json.loads(first_line)
        single = False
    except ValueError:
        single = True
    if single:
        # one (pretty-printed) document, not JSON Lines
        text = first_line + stream.read()
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as e:
            report.errors.append(f"not valid JSON: {e}")
            return
        for d in doc if isinstance(doc, list) else [doc]:
            _note_foreign(d, foreign)
            try:
                report.spans_seen += add_json(d, batch_ref())
            except MalformedOTLP as e:
                report.errors.append(str(e))
        return
    docs = _chain_first(first_doc, lines)
    for lineno, item in enumerate(docs, 1):
        if item is _BLANK:
            continue
        if isinstance(item, _BadLine):
            if len(report.errors) < 100:
                report.errors.append(f"line {lineno}: {item.why}")
            continue
        _note_foreign(item, foreign)
        try:
            report.spans_seen += add_json(item, batch_ref())
        except MalformedOTLP as e:
            if len(report.errors) < 100:
                report.errors.append(f"line {lineno}: {e}")
        if len(batch_ref()) >= CHUNK_SPANS:
            flush()


_BLANK = object()


@dataclass
class _BadLine:
    why: str


def _chain_first(first_doc, lines) -> Iterator:
    yield first_doc
    for line in lines:
        if not line.strip():
            yield _BLANK
            continue
        try:
            yield json.loads(line)
        except UnicodeDecodeError:
            yield _BadLine("not UTF-8")
        except (ValueError, RecursionError) as e:
            yield _BadLine(f"not valid JSON ({e})")
