"""The OTLP receiver behind ``otel-assay collect``: gRPC TraceService and HTTP /v1/traces.

Both listeners hand batches to one :class:`Collector`, which validates spans, drops
retransmitted ones, appends the batch to the write-ahead log (acknowledging only after
fsync), and lets a background flusher turn the log into Parquet. Status codes, partial
success, throttling and error bodies follow the OTLP specification
(reference/storage.md §3).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hmac
import io
import ipaddress
import json
import logging
import re
import resource
import socket
import ssl
import threading
import time
import zlib
from concurrent import futures
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import compiled
from ..lake.files import Lake, check_lake_file
from .otlp import MalformedOTLP, TooManyRows, add_json, json_rows, parse_json
from ..lake.rows import SpanBatch
from ..lake.schema import DEFAULT_LIMITS, Limits
from .wal import WALError, WriteAheadLog, decode, read_segment

log = logging.getLogger("otel_assay.collect")

DEFAULT_MAX_BODY = 20 << 20  # decompressed request size limit (the Collector's default)
# The lowest limit on the spans, events and links of one request, whatever
# --max-buffered-spans says: a body's size does not bound its rows (an empty event is 2
# bytes of protobuf and about 460 bytes of memory on its way to the lake; 20 MiB of them
# took the collector to 3.9 GB), so the rows are counted before they are decoded. An OTLP
# exporter sends 512 spans a batch, the Collector's batch processor 8,192.
MIN_REQUEST_ROWS = 100_000
DRAIN_LIMIT = 128 << 20  # an oversized body up to this size is read and discarded before the 413
# gRPC calls accepted at once; those beyond the worker threads wait for one. grpcio refuses
# the rest with RESOURCE_EXHAUSTED and no RetryInfo, which the Collector's OTLP exporter
# does not retry (the batch is dropped), so this is far above what a sender runs at once
# (the Collector's sending queue: 10 consumers) and the worker threads bound the decoding.
GRPC_MAX_CALLS = 128
# seconds a body waits for the decoding budget (Collector.max_decoding_bytes) before its
# client is told to retry: a 20 MiB body takes about 2 s to decode, and the client's upload
# is already done, so waiting for one or two ahead beats having it sent again
DECODE_WAIT_S = 5.0
# descriptors kept out of the connection caps: the log, the lake's files, gRPC's own, imports
FD_RESERVE = 64
# a connection that has sent nothing: a kept-alive idle one closes after its idle timeout, a
# raw TCP one on the gRPC port after this many ms (grpcio's default, 120 s, let idle sockets
# hold the descriptors that new clients need for two minutes)
GRPC_HANDSHAKE_TIMEOUT_MS = 10_000
# out of descriptors, the listening socket stays readable and every accept() fails at once:
# the accept loop pauses between tries, from the first delay doubling up to the last
ACCEPT_BACKOFF = (0.05, 1.0)


def default_max_connections() -> int:
    """Connections each listener holds open at most by default: half of what RLIMIT_NOFILE
    leaves after a reserve, so that idle clients on one listener cannot take every descriptor
    (the other listener, the log and the lake need theirs); at most 1024 (one thread each)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(8, min(1024, (soft - FD_RESERVE) // 2))


class Overloaded(Exception):
    """Too much is buffered; the client should retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: int, why: str):
        super().__init__(why)
        self.retry_after = retry_after


@dataclass
class IngestResult:
    received: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    error_message: str = ""


@dataclass
class CollectorStats:
    requests: int = 0
    spans_received: int = 0
    spans_accepted: int = 0
    spans_duplicate: int = 0
    spans_rejected: int = 0
    spans_written: int = 0
    throttled: int = 0
    malformed: int = 0
    too_many_rows: int = 0  # requests refused for holding more rows than max_request_rows
    files_written: int = 0
    flush_errors: int = 0
    last_flush_error: str | None = None
    reject_reasons: dict[str, int] = field(default_factory=dict)


class _RecentKeys:
    """The (trace_id, span_id) keys of the last ``capacity`` accepted spans.

    Keys are 64-bit hashes (a false match needs a hash collision among the window's keys:
    ~3e-8 at one million); a window, not the whole lake, because retransmissions follow
    a lost acknowledgement within seconds. ``compact`` removes any older duplicate.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._set: set[int] = set()
        self._fifo: collections.deque[int] = collections.deque()
        # fifo entries of forgotten keys, by key: such an entry is older than any entry the
        # key gets when it is added again, so when it leaves the window it must not take
        # the newer one with it, and it does not count against the capacity
        self._stale: dict[int, int] = {}
        self._n_stale = 0

    def __len__(self) -> int:
        return len(self._set)

    def __contains__(self, key: int) -> bool:
        return key in self._set

    def add_new(self, keys: list[int]) -> list[bool]:
        """Mark which keys are new and remember them (a key repeated within ``keys`` counts once)."""
        s, fifo = self._set, self._fifo
        if s.isdisjoint(keys) and len(set(keys)) == len(keys):
            # the usual batch, every key new and none twice: set operations instead of a
            # Python iteration per span
            s.update(keys)
            fifo.extend(keys)
            fresh = [True] * len(keys)
        else:
            fresh = []
            for k in keys:
                if k in s:
                    fresh.append(False)
                else:
                    s.add(k)
                    fifo.append(k)
                    fresh.append(True)
        excess = len(fifo) - self._n_stale - self.capacity
        if excess > 0 and not self._n_stale:
            # without given-back keys, each entry of the fifo is a key of the window, once
            s.difference_update([fifo.popleft() for _ in range(excess)])
        while len(fifo) - self._n_stale > self.capacity:
            k = fifo.popleft()
            n = self._stale.get(k) if self._n_stale else None
            if n is None:
                s.discard(k)
                continue
            self._n_stale -= 1
            if n == 1:
                del self._stale[k]
            else:
                self._stale[k] = n - 1
        return fresh

    def forget(self, keys: list[int]) -> None:
        for k in keys:
            if k in self._set:
                self._set.discard(k)
                self._stale[k] = self._stale.get(k, 0) + 1
                self._n_stale += 1
        # stale entries leave only from the front of a full window: through an outage that
        # fails every commit they would pile up, so past half the fifo they are swept out
        if self._n_stale > max(1024, len(self._fifo) // 2):
            kept, seen = [], set()
            for k in reversed(self._fifo):  # a key's live entry is its newest
                if k in self._set and k not in seen:
                    seen.add(k)
                    kept.append(k)
            self._fifo = collections.deque(reversed(kept))
            self._stale.clear()
            self._n_stale = 0


class _Claim:
    """The keys a commit took into the dedupe window, until its batch is in the log or failed."""

    __slots__ = ("keys", "done")

    def __init__(self):
        self.keys: list[int] = []
        self.done = threading.Event()


def _span_keys(trace_ids: list[str], span_ids: list[str]) -> list[int]:
    return [hash(t + s) for t, s in zip(trace_ids, span_ids)]


class Collector:
    """Durable, deduplicating ingest into a lake; shared by the gRPC and HTTP listeners."""

    def __init__(
        self,
        lake_dir: str | Path,
        *,
        limits: Limits = DEFAULT_LIMITS,
        max_buffered_spans: int = 500_000,
        flush_rows: int = 200_000,
        flush_seconds: float = 2.0,
        dedupe_window: int = 1_000_000,
        fsync: bool = True,
        max_decoding_bytes: int = DEFAULT_MAX_BODY,
    ):
        self.lake = Lake(lake_dir)
        self.lake.ensure_writable()
        self.limits = limits
        self.max_buffered_spans = max_buffered_spans
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.fsync = fsync
        self.max_decoding_bytes = max_decoding_bytes
        self._decoding_bytes = 0  # of the bodies being decoded now
        self._decode_cv = threading.Condition()
        self._decode_queue: collections.deque[object] = collections.deque()  # bodies waiting, in order
        self.stats = CollectorStats()
        self._recent = _RecentKeys(dedupe_window)
        self._dedupe_lock = threading.Lock()
        self._claims: list[_Claim] = []  # commits whose new keys are not in the log yet
        self._stats_lock = threading.Lock()
        self._flushing_rows = 0
        self._flush_lock = threading.Lock()
        # sealed segments whose Parquet write failed (a full disk): retried at every flush,
        # counted as buffered so the receiver pushes back instead of growing
        self._unwritten: list = []
        self._inflight = 0  # commits between their capacity check and the log
        self._inflight_cv = threading.Condition()
        self._closing = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._last_flush = time.monotonic()
        self.wal = WriteAheadLog(self.lake.wal_dir, fsync=fsync)
        self.replayed_spans = self._replay()
        self._seed_recent_keys()
        self._flusher = threading.Thread(target=self._flush_loop, name="otel-assay-flusher", daemon=True)
        self._flusher.start()

    # ------------------------------------------------------------------ startup
    def _replay(self) -> int:
        """Turn log segments left by an earlier run (a crash) into Parquet."""
        n = 0
        for seg in self.wal.existing_segments():
            skipped: list[tuple[int, int]] = []
            parts = [decode(p) for p in read_segment(seg, skipped)]
            if parts:
                tables = {name: pa.concat_tables([p[name] for p in parts]) for name in parts[0]}
                self.lake.write(tables, token=seg.stem, fsync=self.fsync)
                n += tables["spans"].num_rows
                spans = tables["spans"]
                self._recent.add_new(_span_keys(spans.column("trace_id").to_pylist(), spans.column("span_id").to_pylist()))
            size = seg.stat().st_size
            # bytes skipped at the end are a record a crash tore, never acknowledged; bytes
            # skipped before an intact record are damage nothing explains for sure
            damaged = [(off, length) for off, length in skipped if off + length < size]
            if damaged:
                aside = self.lake.wal_dir / "damaged" / seg.name
                aside.parent.mkdir(exist_ok=True)
                seg.rename(aside)  # out of the replay's way: its records are in the lake now
                log.warning("write-ahead log segment %s is damaged: skipped %d bytes in %d place(s) (at offsets %s) "
                            "that are no intact record, and recovered the %d records around them; kept as %s",
                            seg.name, sum(length for _o, length in damaged), len(damaged),
                            ", ".join(str(off) for off, _l in damaged[:10]), len(parts), aside)
            else:
                if skipped:
                    log.info("write-ahead log segment %s ends in %d bytes of a record torn by a crash (never "
                             "acknowledged)", seg.name, skipped[0][1])
                seg.unlink()
        if n:
            log.info("replayed %d spans from the write-ahead log", n)
        return n

    def _seed_recent_keys(self) -> None:
        """Remember the newest files' span keys, so a batch retransmitted across a restart is still caught."""
        files = sorted(self.lake.live_files("spans"), key=lambda p: p.stat().st_mtime, reverse=True)
        budget = self._recent.capacity - len(self._recent)
        for f in files:
            if budget <= 0:
                break
            if check_lake_file(f, "spans"):
                continue
            try:
                t = pq.read_table(f, columns=["trace_id", "span_id"])
            except (OSError, pa.ArrowException):
                continue
            self._recent.add_new(_span_keys(t.column("trace_id").to_pylist(), t.column("span_id").to_pylist()))
            budget -= t.num_rows

    # ------------------------------------------------------------------ ingest
    @property
    def buffered_rows(self) -> int:
        """Spans, events and links acknowledged but not yet in Parquet (``max_buffered_spans``
        bounds them: each is a row in memory until it is written)."""
        return self.wal.buffered_rows + self._flushing_rows + sum(seg.rows for seg in self._unwritten)

    @property
    def unwritten_spans(self) -> int:
        """Acknowledged spans whose Parquet write failed and is being retried."""
        return sum(seg.spans for seg in self._unwritten)

    @property
    def max_request_rows(self) -> int:
        """The most spans, events and links one request may hold (see MIN_REQUEST_ROWS)."""
        return max(self.max_buffered_spans, MIN_REQUEST_ROWS)

    def _check_rows(self, rows: int | None) -> None:
        if rows is not None and rows > self.max_request_rows:
            raise TooManyRows(rows, self.max_request_rows)

    @contextlib.contextmanager
    def _counting_refusals(self):
        try:
            yield
        except TooManyRows:
            with self._stats_lock:
                self.stats.too_many_rows += 1
            raise

    @property
    def _flush_at(self) -> int:
        # a small --max-buffered-spans must not wait for flush_rows (or the timer) to drain
        return max(1, min(self.flush_rows, self.max_buffered_spans // 2))

    def check_capacity(self) -> None:
        """Raise :class:`Overloaded` before any decoding work when the buffer is full."""
        if self._stop.is_set():
            raise Overloaded(5, "collector is shutting down")
        buffered = self.buffered_rows
        if buffered >= self.max_buffered_spans:
            with self._stats_lock:
                self.stats.throttled += 1
            self._wake.set()
            raise Overloaded(1, f"{buffered} spans, events and links waiting to be written; retry shortly")

    def submit_protobuf(self, body: bytes) -> IngestResult:
        """Store a protobuf request's spans. Raises :class:`TooManyRows` (413) for a request
        of more rows than ``max_request_rows``, before decoding them."""
        self.check_capacity()
        with self._decoding(len(body)), self._counting_refusals():
            batch, received = compiled.protobuf_batch(body, self.limits, self.max_request_rows)
            return self._commit(batch, received)

    def submit_json(self, body: bytes) -> IngestResult:
        self.check_capacity()
        with self._decoding(len(body)), self._counting_refusals():
            doc = parse_json(body)
            self._check_rows(json_rows(doc))
            batch = SpanBatch(self.limits)
            received = add_json(doc, batch)
            return self._commit(batch, received)

    @contextlib.contextmanager
    def _decoding(self, size: int):
        """Hold ``size`` bytes of the decoding budget while a body is decoded and stored.

        On the simple path a body costs about fifteen times its size on its way to the log
        (the parsed message, the span rows, the Arrow tables, the log record), and the process
        keeps most of that memory afterwards: two 20 MiB requests at once took the collector
        past 700 MiB. The compiled decoder needs less, but any request can take the simple path.
        Decoding waits until the bodies being decoded fit in ``max_decoding_bytes``, so big
        requests go one at a time while small ones still share it; a body larger than the
        budget goes alone. Bodies get in in the order they came (a big one is not passed for
        ever by small ones); one that waits past ``DECODE_WAIT_S`` is told to retry.
        """
        with self._decode_cv:
            turn = object()
            self._decode_queue.append(turn)
            if not self._decode_cv.wait_for(
                    lambda: self._decode_queue[0] is turn and (
                        not self._decoding_bytes or self._decoding_bytes + size <= self.max_decoding_bytes),
                    timeout=DECODE_WAIT_S):
                self._decode_queue.remove(turn)
                self._decode_cv.notify_all()
                with self._stats_lock:
                    self.stats.throttled += 1
                raise Overloaded(1, "too many large requests being decoded; retry shortly")
            self._decode_queue.popleft()
            self._decoding_bytes += size
            self._decode_cv.notify_all()  # the next in line may fit beside this one
        try:
            yield
        finally:
            with self._decode_cv:
                self._decoding_bytes -= size
                self._decode_cv.notify_all()

    def _commit(self, batch: SpanBatch, received: int) -> IngestResult:
        with self._inflight_cv:
            if self._closing:  # the last flush has begun: nothing may be acknowledged after it
                raise Overloaded(5, "collector is shutting down")
            self._inflight += 1
        try:
            return self._commit_locked(batch, received)
        finally:
            with self._inflight_cv:
                self._inflight -= 1
                self._inflight_cv.notify_all()

    def _commit_locked(self, batch: SpanBatch, received: int) -> IngestResult:
        result = IngestResult(received=received, rejected=batch.rejected)
        keys = batch.keys if isinstance(batch, compiled.CompiledBatch) else _span_keys(*batch.span_keys())
        claim = _Claim()
        stored = False
        try:
            fresh = self._claim_keys(keys, claim)
            result.duplicates = fresh.count(False)
            tables = batch.tables(keep=fresh if result.duplicates else None)
            result.accepted = tables["spans"].num_rows
            if result.accepted:
                self.wal.append(tables, result.accepted)
            stored = True
        finally:
            with self._dedupe_lock:
                if not stored:
                    # not stored (the log failed, or building the tables did): a retry must
                    # not be taken for a duplicate and silently dropped
                    self._recent.forget(claim.keys)
                if claim in self._claims:
                    self._claims.remove(claim)
            claim.done.set()
        if batch.rejected:
            reasons = sorted(batch.reject_reasons.items(), key=lambda kv: -kv[1])
            result.error_message = "; ".join(f"{n} span(s): {why}" for why, n in reasons[:5])
        with self._stats_lock:
            st = self.stats
            st.requests += 1
            st.spans_received += received
            st.spans_accepted += result.accepted
            st.spans_duplicate += result.duplicates
            st.spans_rejected += batch.rejected
            for why, n in batch.reject_reasons.items():
                if len(st.reject_reasons) < 100 or why in st.reject_reasons:
                    st.reject_reasons[why] = st.reject_reasons.get(why, 0) + n
        if self.wal.buffered_rows >= self._flush_at:
            self._wake.set()
        return result

    def _claim_keys(self, keys: list[int], claim: "_Claim") -> list[bool]:
        """Which of ``keys`` are new; the new ones become ``claim``'s until its commit ends.

        A key already in the window may belong to a commit still on its way to the log (a
        client that timed out resends while the first attempt is being fsynced). If that
        commit then fails, its keys leave the window, and the resend, taken for a duplicate,
        would have been acknowledged and dropped: so a batch whose duplicates are in flight
        waits for those commits and claims the keys they gave back.
        """
        with self._dedupe_lock:
            fresh = self._recent.add_new(keys)
            claim.keys = [k for k, f in zip(keys, fresh) if f]
            self._claims.append(claim)
            waiting = self._claims_holding([k for k, f in zip(keys, fresh) if not f], claim)
        while waiting:
            for other in waiting:
                other.done.wait()
            with self._dedupe_lock:
                # keys a failed commit gave back are ours now; keys that reached the log are duplicates
                for i, k in enumerate(keys):
                    if not fresh[i] and k not in self._recent:
                        self._recent.add_new([k])
                        claim.keys.append(k)
                        fresh[i] = True
                waiting = self._claims_holding([k for k, f in zip(keys, fresh) if not f], claim)
        return fresh

    def _claims_holding(self, dup_keys: list[int], own: "_Claim") -> list["_Claim"]:
        """The in-flight commits older than ``own`` that claimed any of ``dup_keys``.

        Only older ones: waits then never form a cycle. A key a newer commit holds counts as
        a duplicate (that commit stores it, or fails and its own client retries). Only
        called with duplicates, which are rare, so the common path pays nothing for it.
        """
        if not dup_keys:
            return []
        dups = set(dup_keys)
        older = self._claims[:self._claims.index(own)]
        return [c for c in older if not c.done.is_set() and not dups.isdisjoint(c.keys)]

    def note_throttled(self) -> None:
        with self._stats_lock:
            self.stats.throttled += 1

    def note_malformed(self) -> None:
        with self._stats_lock:
            self.stats.malformed += 1

    # ------------------------------------------------------------------ flushing
    def flush(self) -> int:
        """Write everything acknowledged so far to Parquet; return the spans written."""
        with self._flush_lock:
            # every row stays counted in buffered_rows until its write has succeeded or it is
            # back in _unwritten (check_capacity reads them without a lock): a moment's double
            # count only throttles early, while a gap let requests past the bound during a
            # retry of failed writes
            retry = list(self._unwritten)
            self._flushing_rows = sum(seg.rows for seg in retry)
            self._unwritten = []
            self._flushing_rows += self.wal.buffered_rows
            segment = self.wal.seal()
            self._flushing_rows = sum(seg.rows for seg in retry) + segment.rows
            written = 0
            try:
                for seg in retry + [segment]:
                    if self._write_segment(seg):
                        written += seg.spans
                    else:
                        self._unwritten.append(seg)
                    self._flushing_rows -= seg.rows
            finally:
                self._flushing_rows = 0
                self._last_flush = time.monotonic()
            return written

    def _write_segment(self, segment) -> bool:
        """Write a sealed segment to Parquet and delete it; False (segment kept) if that failed."""
        try:
            if segment.tables:
                names = segment.tables[0].keys()
                tables = {n: pa.concat_tables([t[n] for t in segment.tables]) for n in names}
                self.lake.write(tables, token=segment.token, fsync=self.fsync)
                with self._stats_lock:
                    self.stats.spans_written += segment.spans
                    self.stats.files_written += 1
            segment.path.unlink(missing_ok=True)
            return True
        except OSError as e:
            # the segment stays on disk (replayed at the next start) and is retried at the next flush
            with self._stats_lock:
                self.stats.flush_errors += 1
                self.stats.last_flush_error = str(e)
            log.error("writing Parquet to %s failed: %s; the write-ahead log keeps the spans, retrying",
                      self.lake.root, e)
            return False

    def _flush_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=min(0.25, self.flush_seconds))
            self._wake.clear()
            if self._stop.is_set():
                break
            due = time.monotonic() - self._last_flush >= self.flush_seconds
            if (self.wal.buffered_rows or self._unwritten) and (due or self.wal.buffered_rows >= self._flush_at):
                self.flush()

    def close(self) -> None:
        """Stop the flusher, write what is buffered, close the log."""
        self._stop.set()
        self._wake.set()
        with self._inflight_cv:  # let acknowledgements already on their way land in the log first
            self._closing = True
            self._inflight_cv.wait_for(lambda: self._inflight == 0, timeout=30)
        self._flusher.join(timeout=30)
        self.flush()
        self.wal.close()
        # the segment opened by the last seal is empty
        for seg in self.lake.wal_dir.glob("seg-*.wal"):
            if seg.stat().st_size == 0:
                seg.unlink()


# ====================================================================== HTTP
def _status_json(code: int, message: str) -> bytes:
    return json.dumps({"code": code, "message": message}).encode()


def _status_proto(code: int, message: str) -> bytes:
    from google.rpc import status_pb2

    return status_pb2.Status(code=code, message=message).SerializeToString()


def _read_gzip(body: bytes, limit: int) -> bytes:
    """The decompressed body, every member of it (RFC 1952 §2.2: a gzip file is a series of
    members, which is what concatenated gzip streams are); anything after the last member
    that is not one is malformed."""
    parts: list[bytes] = []
    size = 0
    data = body
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(data, limit + 1 - size)
        except zlib.error as e:
            raise MalformedOTLP(f"invalid gzip body: {e}") from None
        size += len(out)
        if size > limit:
            raise _TooLarge(limit)
        if not d.eof:
            raise MalformedOTLP("truncated gzip body")
        parts.append(out)
        data = d.unused_data
        if not data:
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _bearer_ok(authorization: str | None, token: str) -> bool:
    """Whether an Authorization value carries ``token``: the scheme name is case-insensitive
    (RFC 9110 §11.1), the token is compared in constant time."""
    scheme, _, credentials = (authorization or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token.encode())


def _content_length(values: list[str] | None) -> int | None:
    """The body length a request's Content-Length headers give; None without one, -1 when
    invalid. RFC 9110 §8.6: 1*DIGIT, and several values (repeated headers or a list) only
    if they are all the same. int() alone took "+5", "5_0", "\\x0b5" and non-ASCII digits,
    so that a proxy in front could read another length than the collector."""
    if not values:
        return None
    lengths = {v.strip(" \t") for value in values for v in value.split(",")}
    if len(lengths) != 1:
        return -1
    (v,) = lengths
    return int(v) if v.isascii() and v.isdigit() else -1


class _TooLarge(Exception):
    def __init__(self, limit: int, after: str = " after decompression"):
        super().__init__(f"request body exceeds {limit} bytes{after}")


class _BadChunk(Exception):
    """A chunked body that breaks RFC 9112 §7.1."""


class _Late(Exception):
    """The body fell behind the upload schedule, or the client closed mid-body."""


_CHUNK_LINE_MAX = 4096  # a chunk-size line with its extensions, or one trailer field line
_TRAILER_FIELDS_MAX = 64
# a chunk extension: tab, space, visible ASCII and obs-text; no CR, NUL or other control
_CHUNK_EXT = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")


def _max_chunks(limit: int) -> int:
    """How many chunks a body of up to ``limit`` bytes may come in: 1 KiB a chunk on
    average, past the first 64. Each chunk costs a parse and system calls whatever its size,
    so a body sent a byte a chunk cost a minute of CPU and a gigabyte per 20 MiB."""
    return 64 + limit // 1024


def _chunk_size(line: bytes) -> int:
    """The size a chunk-size line gives (RFC 9112 §7.1: 1*HEXDIG, then extensions, which are
    ignored, then CRLF). Strict on purpose: a lenient reading (a bare LF, a sign, "0x",
    whitespace without an extension, a control character) is where a proxy in front and this
    server can disagree on where the body ends. More than 16 digits (zeros in front) is
    refused too."""
    if len(line) > _CHUNK_LINE_MAX or not line.endswith(b"\r\n"):
        raise _BadChunk("a chunk-size line must end with CRLF within 4096 bytes")
    size, semicolon, ext = line[:-2].partition(b";")
    if semicolon:
        size = size.rstrip(b" \t")  # BWS before the extension
        if not _CHUNK_EXT.fullmatch(ext):
            raise _BadChunk("a control character in a chunk extension")
    if not 0 < len(size) <= 16 or size.strip(b"0123456789abcdefABCDEF"):
        raise _BadChunk(f"invalid chunk size {size[:40]!r}: send hexadecimal digits (RFC 9112 §7.1)")
    return int(size, 16)


def _check_trailer(line: bytes) -> None:
    """A trailer field line, held to the header section's rules (they are read and ignored)."""
    if len(line) > _CHUNK_LINE_MAX or not line.endswith(b"\r\n"):
        raise _BadChunk("a trailer field line must end with CRLF within 4096 bytes")
    if _field_line(line[:-2].decode("latin-1")) is None:
        raise _BadChunk(f"malformed trailer field line {line[:60]!r}")


def _chunked_refusal(te: list[str], content_length: list[str] | None, version: str) -> tuple[int, int, str] | None:
    """Why a request with Transfer-Encoding cannot be read, as (HTTP status, gRPC code,
    message), or None when its body is plainly chunked."""
    if version == "HTTP/1.0":  # RFC 9112 §6.1: a 1.0 client cannot have meant it
        return 400, 3, "Transfer-Encoding in an HTTP/1.0 request; send a Content-Length"
    if content_length:
        # RFC 9112 §6.3: the two together are how requests are smuggled past a proxy
        return 400, 3, "both Transfer-Encoding and Content-Length; send one of them"
    # space and tab only (RFC 9110 §5.6.1): str.strip() also took \x0b, \x0c, \x1c and
    # \xa0, the classic ways to hide "chunked" from a proxy that does not strip them
    codings = [c.strip(" \t").lower() for v in te for c in v.split(",") if c.strip(" \t")]
    if codings == ["chunked"]:
        return None
    if not codings or codings[-1] != "chunked" or codings.count("chunked") > 1:
        return 400, 3, "chunked must be the last transfer coding, and only once (RFC 9112 §6.3)"
    return 501, 12, (f"transfer coding {', '.join(codings)[:100]!r} is not supported: only chunked is; "
                     "compress with Content-Encoding: gzip")


class _Body:
    """A request body as it arrives, on a schedule: each byte is due by its place (a grace,
    then ``min_body_rate``), not only the last one by the end, so a client that declares a
    large body and sends nothing, or trickles it, or sends a chunk-size line a byte at a time,
    loses its slot. Iterating gives the data in pieces; ``_Late`` ends it when the client
    falls behind or closes, ``_BadChunk`` when a chunked body is malformed."""

    def __init__(self, handler: "_Handler", length: int | None, max_chunks: int):
        self.handler = handler
        self.max_chunks = max_chunks  # a chunked body in more chunks is refused (_BadChunk)
        self.length = length  # None: chunked
        self.due = time.monotonic() + handler.body_grace_s
        self.got = 0  # data bytes so far
        self.chunks = 0
        self._pieces = self._generate()  # one parse of the stream, resumed by read() and drain()

    def _read(self, n: int, line: bool = False) -> bytes:
        h = self.handler
        left = self.due + (self.got + 1) / h.min_body_rate - time.monotonic()
        if left <= 0:
            raise _Late
        # a deadline for the whole call: readline() waits for the socket once per byte that
        # arrives, each wait bounded by the socket timeout alone
        h._reader.deadline = time.monotonic() + min(left, h.timeout)
        try:
            data = h.rfile.readline(n) if line else h.rfile.read1(n)
        except (TimeoutError, socket.timeout):
            raise _Late from None
        finally:
            h._reader.deadline = None
            h.connection.settimeout(h.timeout)  # the reply and the next request have their own
        if not data:
            raise _Late
        return data

    def __iter__(self):
        return self._pieces

    def _generate(self):
        if self.length is not None:
            while self.got < self.length:
                piece = self._read(min(self.length - self.got, 1 << 20))
                self.got += len(piece)
                yield piece
            return
        while True:
            size_line = self._read(_CHUNK_LINE_MAX + 1, line=True)
            if len(size_line) <= _CHUNK_LINE_MAX and not size_line.endswith(b"\n"):
                raise _Late  # the client closed mid-line
            size = _chunk_size(size_line)
            if size == 0:
                break
            self.chunks += 1
            if self.chunks > self.max_chunks:
                raise _BadChunk(f"more than {self.max_chunks} chunks; send chunks of 1 KiB or more")
            while size:
                piece = self._read(min(size, 1 << 20))
                self.got += len(piece)
                size -= len(piece)
                yield piece
            if self._read(3, line=True) != b"\r\n":
                raise _BadChunk("a chunk's data is not followed by CRLF (is the chunk size right?)")
        for _ in range(_TRAILER_FIELDS_MAX + 1):  # the trailer section, read and ignored
            trailer = self._read(_CHUNK_LINE_MAX + 1, line=True)
            if trailer == b"\r\n":
                return
            if len(trailer) <= _CHUNK_LINE_MAX and not trailer.endswith(b"\n"):
                raise _Late
            _check_trailer(trailer)
        raise _BadChunk(f"more than {_TRAILER_FIELDS_MAX} trailer fields")

    def read(self, limit: int) -> bytes:
        """All of the body; ``_TooLarge`` past ``limit`` bytes (the rest is left unread)."""
        pieces: list[bytes] = []
        small = bytearray()  # a trickled body's pieces, in one buffer rather than an object each
        for piece in self:
            if len(piece) < 65536:
                small += piece
            else:
                if small:
                    pieces.append(bytes(small))
                    small.clear()
                pieces.append(piece)
            if self.got > limit:
                raise _TooLarge(limit, "")
        if small:
            pieces.append(bytes(small))
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def drain(self, cap: int) -> bool:
        """Read and discard the rest, up to ``cap`` bytes (and ``_max_chunks(cap)`` chunks);
        whether it all came."""
        self.max_chunks = _max_chunks(cap)
        try:
            for _ in self:
                if self.got > cap:
                    return False
        except (_Late, _BadChunk):
            return False
        return True


class _DeadlineReader(io.RawIOBase):
    """The connection's bytes, each read bounded by ``deadline`` (monotonic) when one is set:
    the socket timeout alone bounds the wait for each next byte, not for all of them."""

    def __init__(self, sock):
        self.sock = sock
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request line and headers did not arrive in time")
            self.sock.settimeout(left)
        return self.sock.recv_into(b)


class _Headers:
    """A request's header fields: names case-insensitive, repeated fields kept in order (the
    part of ``email.message.Message`` the handler reads)."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, list[str]]):
        self._fields = fields

    def get(self, name: str, default=None):
        values = self._fields.get(name.lower())
        return values[0] if values else default

    def get_all(self, name: str, failobj=None):
        values = self._fields.get(name.lower())
        return list(values) if values else failobj


class _BadHead(Exception):
    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


# RFC 9110 §5.1: a field name is a token
_FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_MAX_HEADERS = 100  # as http.client's _MAXHEADERS
# the whole header section, as http.client's _MAXLINE bounds one line: 100 lines of 64 KiB
# each, on each of a thousand connections, was 6 GB of heads held at once
_MAX_HEADER_BYTES = 65536
_HTTP_VERSION = re.compile(r"HTTP/([0-9])\.([0-9])")  # RFC 9112 2.3


def _without_line_end(line: str) -> str:
    """``line`` without its CRLF or LF: one, so that a CR before it stays to be refused (a
    bare CR, RFC 9112 2.2)."""
    return line.removesuffix("\r\n") if line.endswith("\r\n") else line.removesuffix("\n")


def _field_line(text: str) -> tuple[str, str] | None:
    """(name, value) of a field line without its line end (RFC 9112 §5: a token, a colon
    with no whitespace before it, no CR or NUL in the value), or None when it is malformed;
    for header and trailer fields alike."""
    name, colon, value = text.partition(":")
    if not colon or not _FIELD_NAME.fullmatch(name) or "\r" in value or "\0" in value:
        return None
    return name, value.strip(" \t")


def _read_header_fields(rfile) -> _Headers:
    """Read and parse a request's header section (RFC 9112 §5), strictly.

    The standard library's parser (the email package's) takes what RFC 9112 tells a server
    to refuse, and a proxy in front may read such a request otherwise (request smuggling): a
    line folded onto the previous one, whitespace between a field name and its colon, a
    line without a colon. It also cost three times as much (22 µs a request, 7 here)."""
    fields: dict[str, list[str]] = {}
    left = _MAX_HEADER_BYTES
    for _ in range(_MAX_HEADERS + 1):
        line = rfile.readline(left + 1)
        left -= len(line)
        if left < 0:
            raise _BadHead(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                           f"header section larger than {_MAX_HEADER_BYTES} bytes")
        if line in (b"\r\n", b"\n"):
            return _Headers(fields)
        if not line.endswith(b"\n"):  # the client closed its side mid-head (RFC 9112 8)
            raise _BadHead(HTTPStatus.BAD_REQUEST, "the connection ended inside the header section")
        text = _without_line_end(line.decode("iso-8859-1"))
        if text[:1] in (" ", "\t"):
            raise _BadHead(HTTPStatus.BAD_REQUEST, "obsolete line folding in a header field")
        field = _field_line(text)
        if field is None:
            raise _BadHead(HTTPStatus.BAD_REQUEST, f"malformed header field line {text[:80]!r}")
        fields.setdefault(field[0].lower(), []).append(field[1])
    raise _BadHead(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"more than {_MAX_HEADERS} header fields")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "otel-assay"
    timeout = 60  # seconds a connection may stall mid-request (slow clients cannot pin a thread forever)
    # a response is one write (_send), but an interim 100 Continue and the final response are
    # two: with Nagle on, a kept-alive client's delayed ACK held the second back ~40 ms
    disable_nagle_algorithm = True
    # what an error found on the request line is sent as (the stdlib's HTTP/0.9 default sent
    # a bare body, without a status line)
    default_request_version = "HTTP/1.1"
    # once a request holds a slot its body must keep coming at least this fast: a client
    # trickling bytes (slowloris) would otherwise pin one of the few slots for as long as it
    # likes, 60 s per byte
    body_grace_s = 10.0
    min_body_rate = 64 << 10  # bytes per second
    # the request line and headers, from their first byte: each header byte resetting the 60 s
    # timeout let a client trickling them hold its connection (a thread and a descriptor) for
    # ever, and a thousand such clients used up the descriptors, so that nobody else, over
    # HTTP or gRPC, could connect (the Collector's ReadHeaderTimeout, shorter)
    head_timeout_s = 10.0
    collector: Collector
    token: str | None
    max_body: int
    slots: threading.BoundedSemaphore  # requests being read and decoded at once (bounds memory)

    def setup(self):
        super().setup()
        self.rfile.close()  # replaced by a reader that can hold the request head to a deadline
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self):
        reader = self._reader
        # waiting for the next request (and the TLS handshake) keeps the idle timeout
        reader.deadline = time.monotonic() + self.timeout
        try:
            if not self.rfile.peek(1):
                self.close_connection = True
                return
        except TimeoutError:
            self.close_connection = True
            return
        reader.deadline = time.monotonic() + self.head_timeout_s
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = self._parse_head()
        # the body has its own schedule (_Body), the drain of a refused one too
        self._reader.deadline = None
        self.connection.settimeout(self.timeout)
        return ok

    def _parse_head(self) -> bool:
        """The request line and the header fields (as ``BaseHTTPRequestHandler.parse_request``,
        but with the strict header parser); on failure the error has been sent."""
        self.command = None
        self.request_version = self.default_request_version
        self.close_connection = True
        if self.raw_requestline in (b"\r\n", b"\n"):  # one empty line before a request is ignored (RFC 9112 2.2)
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return False
        self.requestline = _without_line_end(str(self.raw_requestline, "iso-8859-1"))
        if not self.requestline:
            return False
        if "\r" in self.requestline or "\0" in self.requestline:
            self.send_error(HTTPStatus.BAD_REQUEST, "a CR or NUL in the request line")
            return False
        # method SP request-target SP HTTP-version (RFC 9112 3), the HTTP/0.9 form ("GET /")
        # and other whitespace (str.split took \xa0 and \x1c for a separator) refused
        words = self.requestline.split(" ")
        if len(words) != 3 or not all(words):
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({self.requestline[:200]!r})")
            return False
        command, path, version = words
        m = _HTTP_VERSION.fullmatch(version)
        if not m:
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request version ({version[:40]!r})")
            return False
        number = int(m.group(1)), int(m.group(2))
        if number[0] != 1:
            self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, f"Invalid HTTP version ({version[5:]})")
            return False
        self.request_version = version
        self.close_connection = number < (1, 1)
        if path.startswith("//"):  # as the stdlib: "//x" reads as a host to some clients
            path = "/" + path.lstrip("/")
        self.command, self.path = command, path
        try:
            self.headers = _read_header_fields(self.rfile)
        except _BadHead as e:
            self.close_connection = True  # where the next request would begin is unknown
            self.send_error(e.status, str(e))
            return False
        if number >= (1, 1) and len(self.headers.get_all("Host", ())) != 1:
            self.close_connection = True
            self.send_error(HTTPStatus.BAD_REQUEST, "exactly one Host header field is required")
            return False
        # a list of options (RFC 9112 9.6): "close" anywhere in it wins
        options = {o.strip().lower() for v in self.headers.get_all("Connection", ()) for o in v.split(",")}
        if "close" in options:
            self.close_connection = True
        elif "keep-alive" in options:
            self.close_connection = False
        if self.headers.get("Expect", "").lower() == "100-continue" and number >= (1, 1):
            return self.handle_expect_100()
        return True

    def log_message(self, fmt, *args):  # the collector reports through logging, not stderr noise
        log.debug("%s - " + fmt, self.address_string(), *args)

    def _send(self, code: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:  # say so: a client reusing the connection would hit a broken pipe
            self.send_header("Connection", "close")
        elif self.request_version == "HTTP/1.0":  # it asked to keep the connection: say it is kept
            self.send_header("Connection", "keep-alive")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        # the head and the body leave in one write (the head is buffered by send_header): as
        # two, each small send woke the client and cost the collector a system call's work
        self._headers_buffer.extend((b"\r\n", body))
        self.flush_headers()

    def _error(self, code: int, grpc_code: int, message: str, is_json: bool, headers: dict | None = None) -> None:
        if is_json:
            self._send(code, _status_json(grpc_code, message), "application/json", headers)
        else:
            self._send(code, _status_proto(grpc_code, message), "application/x-protobuf", headers)

    def do_GET(self):
        if self.headers.get("Transfer-Encoding") is not None or \
                _content_length(self.headers.get_all("Content-Length")) not in (None, 0):
            # a GET has no body here: one sent anyway would read as the next request
            self.close_connection = True
        if self.path.rstrip("/") in ("", "/health", "/healthz"):
            c = self.collector
            unwritten = c.unwritten_spans
            # degraded: acknowledged spans are safe in the log but cannot reach Parquet (disk full?)
            body = json.dumps({"status": "degraded" if unwritten else "ok", "buffered_rows": c.buffered_rows,
                               "unwritten_spans": unwritten, "flush_errors": c.stats.flush_errors}).encode()
            self._send(503 if unwritten else 200, body, "application/json")
        else:
            self._error(404, 5, "not found; OTLP traces are POSTed to /v1/traces", True)

    def do_POST(self):
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        is_json = ctype == "application/json"
        if self.path.split("?")[0] != "/v1/traces":
            self.close_connection = True
            return self._error(404, 5, f"no such path {self.path!r}; OTLP traces are POSTed to /v1/traces", is_json)
        # length: the Content-Length, or None for a chunked body (its length is known once read)
        te = self.headers.get_all("Transfer-Encoding")
        refusal = None
        if te is not None:
            length = None
            refusal = _chunked_refusal(te, self.headers.get_all("Content-Length"), self.request_version)
        else:
            length = _content_length(self.headers.get_all("Content-Length"))
        if self.token is not None and not _bearer_ok(self.headers.get("Authorization"), self.token):
            # before any other answer: nothing about the request is told to a client without the
            # token. A body whose end is unknown is not read (the connection closes anyway)
            framed = refusal is None and (te is not None or (length is not None and length >= 0))
            return self._refuse(length if framed else 0, 401, 16,
                                "missing or wrong bearer token (Authorization: Bearer ...)", is_json,
                                {"WWW-Authenticate": "Bearer"})
        if refusal is not None:
            self.close_connection = True  # where the body ends is not known
            return self._error(*refusal, is_json)
        if te is None and length is None:
            self.close_connection = True
            return self._error(411, 3, "Content-Length required (or Transfer-Encoding: chunked)", is_json)
        if length is not None and length < 0:
            self.close_connection = True
            values = ", ".join(self.headers.get_all("Content-Length"))
            return self._error(400, 3, f"invalid Content-Length {values[:100]!r}: send one, as a decimal "
                               "number of bytes (RFC 9110 §8.6)", is_json)
        if ctype not in ("application/x-protobuf", "application/json"):
            return self._refuse(length, 415, 3, f"unsupported Content-Type {ctype!r}; use application/x-protobuf "
                                "or application/json", True)
        if length is not None and length > self.max_body:
            return self._refuse(length, 413, 8, f"request body of {length} bytes exceeds the {self.max_body}-byte "
                                "limit", is_json, drain_limit=DRAIN_LIMIT)
        try:
            self.collector.check_capacity()
        except Overloaded as e:
            return self._refuse(length, 503, 14, str(e), is_json, {"Retry-After": str(e.retry_after)})
        if not self.slots.acquire(timeout=1.0):
            self.collector.note_throttled()
            return self._refuse(length, 503, 14, "too many requests in flight; retry shortly", is_json,
                                {"Retry-After": "1"})
        try:
            body = self._ingest(length, is_json)
        finally:
            self.slots.release()
        if isinstance(body, _Body):  # a chunked body over the size limit: drained out of the slot
            self._refuse(body, 413, 8, f"request body exceeds {self.max_body} bytes", is_json,
                         drain_limit=DRAIN_LIMIT)

    def _refuse(self, body: int | None | _Body, status: int, grpc_code: int, message: str, is_json: bool,
                headers: dict | None = None, *, drain_limit: int | None = None) -> None:
        """Answer ``status`` without taking the request, and close the connection. The body
        (up to a cap: the size limit, or more for the 413 itself) is read and discarded first,
        on the upload schedule, so that a client that sends all of it before reading the reply
        (urllib, for one) gets the status instead of a broken pipe; beyond the cap the
        connection is just closed. ``body``: the Content-Length, None for a chunked body, or
        the ``_Body`` already begun."""
        self.close_connection = True
        cap = drain_limit or self.max_body
        if not isinstance(body, _Body):
            body = _Body(self, body, _max_chunks(cap)) if body is None or 0 < body <= cap else None
        if body is not None and not body.drain(cap) and body.length is not None:
            return None  # the client closed or fell behind: as before, no answer
        try:
            self._error(status, grpc_code, message, is_json, headers)
        except OSError:  # the client did not wait for it
            pass
        return None

    def _ingest(self, length: int | None, is_json: bool) -> "_Body | None":
        """Read, decode and store one request's body, and answer. Returns the body reader
        when a chunked body turned out larger than the limit: the caller drains it (out of
        the request slot) and answers 413."""
        reader = _Body(self, length, _max_chunks(self.max_body))
        try:
            body = reader.read(self.max_body)
        except _TooLarge:
            return reader
        except _BadChunk as e:
            self.close_connection = True
            return self._error(400, 3, f"malformed chunked body: {e}", is_json)
        except _Late:
            body = None
        if body is None:
            self.close_connection = True
            try:
                # 503 + Retry-After, not 408: OTLP exporters retry only 429/502/503/504, and a
                # client on a slow link would otherwise drop the batch for good
                self._error(503, 14, f"the request body did not arrive in time (at least {self.min_body_rate} "
                            "bytes/s after a grace); retry", is_json, {"Retry-After": "1"})
            except OSError:
                pass
            return
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        try:
            if encoding == "gzip":
                body = _read_gzip(body, self.max_body)
            elif encoding not in ("identity", ""):
                return self._error(415, 3, f"unsupported Content-Encoding {encoding!r}; use gzip or none", is_json)
            result = self.collector.submit_json(body) if is_json else self.collector.submit_protobuf(body)
        except (_TooLarge, TooManyRows) as e:
            return self._error(413, 8, str(e), is_json)
        except MalformedOTLP as e:
            self.collector.note_malformed()
            return self._error(400, 3, str(e), is_json)
        except Overloaded as e:
            return self._error(503, 14, str(e), is_json, {"Retry-After": str(e.retry_after)})
        except WALError as e:
            return self._error(503, 14, f"cannot make the batch durable: {e}", is_json, {"Retry-After": "5"})
        except Exception as e:
            # a bug, not the client's fault: without this the client saw the connection drop
            # (and retried the same batch for ever) while the traceback went to stderr
            log.exception("cannot store a request's spans")
            return self._error(500, 13, f"internal error storing the spans: {type(e).__name__}: {str(e)[:200]}",
                               is_json)
        rejected = result.rejected
        if is_json:
            doc = {}
            if rejected or result.error_message:
                doc["partialSuccess"] = {"rejectedSpans": str(rejected), "errorMessage": result.error_message}
            self._send(200, json.dumps(doc).encode(), "application/json")
        else:
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

            resp = ExportTraceServiceResponse()
            if rejected or result.error_message:
                resp.partial_success.rejected_spans = rejected
                resp.partial_success.error_message = result.error_message
            self._send(200, resp.SerializeToString(), "application/x-protobuf")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64
    # what a connection beyond the cap gets before it is closed (not on TLS: it is plaintext)
    _BUSY_BODY = _status_json(14, "too many connections open; retry shortly")
    _BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))

    def __init__(self, addr, handler, family, max_connections: int):
        self.address_family = family
        self.max_connections = max_connections
        self.tls = False
        self.refused_connections = 0
        self._connections = 0
        self._conn_lock = threading.Lock()
        self._refusing = False
        self._backoff = 0.0
        super().__init__(addr, handler)

    def get_request(self):
        try:
            request = super().get_request()
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                raise
            # the pending connection stays queued and the socket readable: retrying at once
            # spun a core until a descriptor came free; pausing lets the open connections finish
            if not self._backoff:
                log.warning("out of file descriptors (%s): pausing new HTTP connections; lower --max-connections "
                            "or raise the limit (ulimit -n)", e.strerror)
            self._backoff = min(ACCEPT_BACKOFF[1], max(ACCEPT_BACKOFF[0], self._backoff * 2))
            time.sleep(self._backoff)
            raise
        if self._backoff:
            log.warning("HTTP listener accepting connections again")
            self._backoff = 0.0
        return request

    def verify_request(self, request, client_address) -> bool:
        with self._conn_lock:
            if self._connections < self.max_connections:
                self._connections += 1
                self._refusing = False
                return True
            self.refused_connections += 1
            first = not self._refusing
            self._refusing = True
        if first:
            log.warning("%d HTTP connections open (--max-connections): refusing new ones until some close",
                        self.max_connections)
        if not self.tls:
            try:
                request.send(self._BUSY, socket.MSG_DONTWAIT)
            except OSError:
                pass
        return False  # the caller closes it

    def process_request(self, request, client_address):
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: the slot is not freed by one
            self._release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._conn_lock:
            self._connections -= 1

    def handle_error(self, request, client_address):
        # a client gone mid-request, or plain HTTP sent to the TLS port, is the client's
        # problem: a debug line, not a traceback on the collector's stderr
        import sys
        exc = sys.exc_info()[1]
        if isinstance(exc, (OSError, ssl.SSLError)):
            log.debug("connection from %s failed: %s", client_address, exc)
        else:
            super().handle_error(request, client_address)


# ====================================================================== gRPC
def _grpc_handler(collector: Collector, token: str | None):
    """The OTLP TraceService as a generic handler that receives raw bytes.

    Parsing the request ourselves (instead of letting grpcio deserialize it) lets a
    malformed payload get INVALID_ARGUMENT, as OTLP asks, rather than grpcio's INTERNAL,
    and lets an overloaded collector refuse before spending time on decoding.
    """
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

    def _retry_trailer(seconds: int):
        from google.protobuf import duration_pb2
        from google.protobuf.any_pb2 import Any
        from google.rpc import error_details_pb2, status_pb2

        detail = Any()
        detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds)))
        st = status_pb2.Status(code=grpc.StatusCode.UNAVAILABLE.value[0], message="overloaded", details=[detail])
        return (("grpc-status-details-bin", st.SerializeToString()),)

    def export(body: bytes, context):
        if token is not None:
            md = dict(context.invocation_metadata())
            if not _bearer_ok(md.get("authorization"), token):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (authorization: Bearer ...)")
        try:
            result = collector.submit_protobuf(body)
        except TooManyRows as e:  # not retried (no RetryInfo): the same batch would be refused again
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        except MalformedOTLP as e:
            collector.note_malformed()
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except Overloaded as e:
            context.set_trailing_metadata(_retry_trailer(e.retry_after))
            context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        except WALError as e:
            context.set_trailing_metadata(_retry_trailer(5))
            context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot make the batch durable: {e}")
        except Exception as e:  # a bug: say so (INTERNAL is not retried) instead of grpcio's UNKNOWN
            log.exception("cannot store a request's spans")
            context.abort(grpc.StatusCode.INTERNAL, f"internal error storing the spans: {type(e).__name__}: {str(e)[:200]}")
        resp = pb.ExportTraceServiceResponse()
        if result.rejected or result.error_message:
            resp.partial_success.rejected_spans = result.rejected
            resp.partial_success.error_message = result.error_message
        return resp

    method = grpc.unary_unary_rpc_method_handler(
        export, request_deserializer=None, response_serializer=pb.ExportTraceServiceResponse.SerializeToString)
    return grpc.method_handlers_generic_handler("opentelemetry.proto.collector.trace.v1.TraceService",
                                                {"Export": method})


# ====================================================================== serving
def parse_hostport(value: str, default_port: int) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT``, ``[::1]:PORT`` or ``HOST`` → (host, port)."""
    value = value.strip()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.lstrip(":") or str(default_port)
    elif value.count(":") == 1:
        host, port = value.split(":")
    elif value.count(":") > 1:  # bare IPv6
        host, port = value, str(default_port)
    else:
        host, port = value, str(default_port)
    host = host or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid port in {value!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Listener:
    protocol: str
    host: str
    port: int
    tls: bool

    def describe(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # "::1:4317" reads as a bare address
        if self.protocol == "http":
            scheme = "https" if self.tls else "http"
            return f"OTLP/HTTP listening on {scheme}://{host}:{self.port}/v1/traces"
        return f"OTLP/gRPC listening on {host}:{self.port}" + (" (TLS)" if self.tls else "")


class Receiver:
    """The gRPC and HTTP listeners around one :class:`Collector`."""

    def __init__(
        self,
        collector: Collector,
        *,
        grpc_addr: tuple[str, int] | None = ("127.0.0.1", 4317),
        http_addr: tuple[str, int] | None = ("127.0.0.1", 4318),
        token: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        grpc_workers: int = 4,
        max_concurrent_requests: int = 4,
        max_connections: int | None = None,
    ):
        self.collector = collector
        self.listeners: list[Listener] = []
        self._http = None
        self._http_thread = None
        self._grpc = None
        tls = bool(tls_cert and tls_key)
        if max_connections is None:
            max_connections = default_max_connections()
        if http_addr is not None:
            host, port = http_addr
            handler = type("Handler", (_Handler,), {"collector": collector, "token": token, "max_body": max_body,
                                                    "slots": threading.BoundedSemaphore(max_concurrent_requests)})
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self._http = _HTTPServer((host, port), handler, family, max_connections)
            if tls:
                self._http.tls = True
                ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                ctx.load_cert_chain(tls_cert, tls_key)
                # handshake in the connection's own thread, not in accept(): a client that
                # stalls (or speaks plain HTTP) must not hold up the listener
                self._http.socket = ctx.wrap_socket(self._http.socket, server_side=True, do_handshake_on_connect=False)
            self.listeners.append(Listener("http", host, self._http.server_address[1], tls))
        if grpc_addr is not None:
            import grpc

            host, port = grpc_addr
            self._grpc = grpc.server(
                futures.ThreadPoolExecutor(max_workers=grpc_workers, thread_name_prefix="otel-assay-grpc"),
                options=[("grpc.max_receive_message_length", max_body), ("grpc.so_reuseport", 0),
                         ("grpc.max_allowed_incoming_connections", max_connections),
                         ("grpc.server_handshake_timeout_ms", GRPC_HANDSHAKE_TIMEOUT_MS)],
                maximum_concurrent_rpcs=max(GRPC_MAX_CALLS, max_concurrent_requests),
            )
            self._grpc.add_generic_rpc_handlers((_grpc_handler(collector, token),))
            target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            if tls:
                creds = grpc.ssl_server_credentials([(Path(tls_key).read_bytes(), Path(tls_cert).read_bytes())])
                bound = self._grpc.add_secure_port(target, creds)
            else:
                bound = self._grpc.add_insecure_port(target)
            if bound == 0:
                raise OSError(f"cannot bind gRPC listener to {target} (address in use?)")
            self.listeners.append(Listener("grpc", host, bound, tls))

    def start(self) -> None:
        if self._grpc is not None:
            self._grpc.start()
        if self._http is not None:
            self._http_thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.2},
                                                 name="otel-assay-http", daemon=True)
            self._http_thread.start()

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish, then flush and close the collector."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1)
        self.collector.close()
