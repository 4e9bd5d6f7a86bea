"""The ingest core behind ``otel-assay collect``, free of any transport.

The gRPC and HTTP listeners (``grpc.py``, ``http.py``, wired in ``server.py``) hand
request bodies to one :class:`Collector`, which validates spans, drops retransmitted ones,
appends the batch to the write-ahead log (acknowledging only after fsync), and lets a
background flusher turn the log into Parquet. It raises :class:`Overloaded` (retry later),
``MalformedOTLP`` and ``TooManyRows``; each transport turns them into its own status codes.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
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
# seconds a body waits for the decoding budget (Collector.max_decoding_bytes) before its
# client is told to retry: a 20 MiB body takes about 2 s to decode, and the client's upload
# is already done, so waiting for one or two ahead beats having it sent again
DECODE_WAIT_S = 5.0
# after a fault, the flusher tries the lake again after RETRY_MIN_S, doubling up to
# RETRY_MAX_S: a brief fault costs clients a fraction of a second, a long one costs the disk
# one probe every few seconds
RETRY_MIN_S = 0.1
RETRY_MAX_S = 2.0
# a fault that comes back within CALM_S of the last one's end goes on with its backoff: a disk
# that fails every other write must not be probed ten times a second
CALM_S = 30.0
# failed Parquet writes are retried after --flush-seconds, doubling up to this: each retry
# writes every waiting segment again, and a full disk does not empty itself in seconds
PARQUET_RETRY_MAX_S = 30.0
# a write to the log that has not returned for this long (a hung disk, a frozen filesystem)
# makes the collector unavailable, rather than letting requests wait for it
STALL_S = 5.0
# how often the flusher looks for the lake and the log's segment when nothing else happens
CHECK_EVERY_S = 1.0


class Overloaded(Exception):
    """Too much is buffered; the client should retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: int, why: str):
        super().__init__(why)
        self.retry_after = retry_after


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    error_message: str = ""


@dataclass
class CollectorStats:
    requests: int = 0
    spans_accepted: int = 0
    spans_duplicate: int = 0
    spans_rejected: int = 0
    spans_written: int = 0
    too_many_rows: int = 0  # requests refused for holding more rows than max_request_rows
    flush_errors: int = 0
    last_flush_error: str | None = None
    faults: int = 0  # times the log stopped taking writes
    longest_fault_s: float = 0.0


@dataclass
class Health:
    """What ``/health`` tells: ``ok``; ``degraded`` (acknowledged spans are safe in the log
    but cannot reach Parquet); ``unavailable`` (the log takes no writes: requests get 503)."""

    status: str
    cause: str | None = None
    since_s: float | None = None  # how long the fault has lasted


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
        self._parquet_fault: str | None = None  # cleared only when every sealed segment is written
        self._parquet_delay = flush_seconds
        self._parquet_retry_at = 0.0
        self._parquet_logged: str | None = None  # the error last logged: each is logged once
        self._undeleted: list[Path] = []  # segments written to Parquet whose file could not be deleted
        self._fault_since: float | None = None  # when the log stopped taking writes
        self._fault_ended = float("-inf")
        self._retry_delay = RETRY_MIN_S
        self._next_retry = 0.0
        self._last_check = 0.0
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

    def health(self) -> Health:
        fault = self.wal.fault
        if fault is not None:
            since = self._fault_since
            return Health("unavailable", fault, None if since is None else time.monotonic() - since)
        if (stalled := self._stalled()) is not None:
            return Health("unavailable", stalled)
        if self._parquet_fault is not None:
            return Health("degraded", f"acknowledged spans are kept in the write-ahead log: {self._parquet_fault}")
        return Health("ok")

    def check_capacity(self) -> None:
        """Raise :class:`Overloaded` before any decoding work when the buffer is full, or
        while the log takes no writes (what fails is said; the flusher is retrying)."""
        if self._stop.is_set():
            raise Overloaded(5, "collector is shutting down")
        fault = self.wal.fault
        if fault is not None:
            self._note_fault()
            wait = max(1, round(self._next_retry - time.monotonic()))
            raise Overloaded(wait, f"the lake cannot take writes now ({fault}); the collector retries by itself")
        if (stalled := self._stalled()) is not None:
            raise Overloaded(5, stalled)
        buffered = self.buffered_rows
        if buffered >= self.max_buffered_spans:
            self._wake.set()
            raise Overloaded(1, f"{buffered} spans, events and links waiting to be written; retry shortly")

    def submit_protobuf(self, body: bytes) -> IngestResult:
        """Store a protobuf request's spans. Raises :class:`TooManyRows` (413) for a request
        of more rows than ``max_request_rows``, before decoding them."""
        self.check_capacity()
        with self._decoding(len(body)), self._counting_refusals():
            batch, _received = compiled.protobuf_batch(body, self.limits, self.max_request_rows)
            return self._commit(batch)

    def submit_json(self, body: bytes) -> IngestResult:
        self.check_capacity()
        with self._decoding(len(body)), self._counting_refusals():
            doc = parse_json(body)
            if (rows := json_rows(doc)) > self.max_request_rows:
                raise TooManyRows(rows, self.max_request_rows)
            batch = SpanBatch(self.limits)
            add_json(doc, batch)
            return self._commit(batch)

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

    def _commit(self, batch: SpanBatch) -> IngestResult:
        with self._inflight_cv:
            if self._closing:  # the last flush has begun: nothing may be acknowledged after it
                raise Overloaded(5, "collector is shutting down")
            self._inflight += 1
        try:
            return self._commit_locked(batch)
        finally:
            with self._inflight_cv:
                self._inflight -= 1
                self._inflight_cv.notify_all()

    def _commit_locked(self, batch: SpanBatch) -> IngestResult:
        result = IngestResult(rejected=batch.rejected)
        keys = batch.keys if isinstance(batch, compiled.CompiledBatch) else _span_keys(*batch.span_keys())
        claim = _Claim()
        stored = False
        try:
            fresh = self._claim_keys(keys, claim)
            result.duplicates = fresh.count(False)
            tables = batch.tables(keep=fresh if result.duplicates else None)
            result.accepted = tables["spans"].num_rows
            if result.accepted:
                try:
                    self.wal.append(tables, result.accepted)
                except WALError:
                    self._note_fault()
                    raise
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
            st.spans_accepted += result.accepted
            st.spans_duplicate += result.duplicates
            st.spans_rejected += batch.rejected
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

    # ------------------------------------------------------------------ flushing
    def _stalled(self) -> str | None:
        waited = self.wal.write_waited_s()
        if waited is not None and waited > STALL_S:
            return f"a write to the write-ahead log has not returned for {waited:.0f} s (a hung disk?)"
        return None

    def _note_fault(self) -> None:
        """Start the clock of a fault the log reported (once per fault)."""
        with self._stats_lock:
            if self._fault_since is None:
                self._start_fault(time.monotonic())
        self._wake.set()

    def _start_fault(self, now: float) -> None:  # with _stats_lock
        self._fault_since = now
        if now - self._fault_ended > CALM_S:
            self._retry_delay = RETRY_MIN_S
        self._next_retry = now + self._retry_delay
        self.stats.faults += 1
        log.error("the lake cannot take writes: %s; refusing requests (503) and retrying", self.wal.fault)

    def flush(self) -> int:
        """Write everything acknowledged so far to Parquet; return the spans written.

        Sealing the log is also its recovery after a fault (see ``WriteAheadLog.seal``)."""
        with self._flush_lock:
            self._undeleted = [p for p in self._undeleted if not self._deleted(p, quiet=True)]
            # every row stays counted in buffered_rows until its write has succeeded or it is
            # back in _unwritten (check_capacity reads them without a lock): a moment's double
            # count only throttles early, while a gap let requests past the bound during a
            # retry of failed writes
            retry = list(self._unwritten)
            self._flushing_rows = sum(seg.rows for seg in retry)
            self._unwritten = []
            self._flushing_rows += self.wal.buffered_rows
            try:
                segment = self.wal.seal()
            except BaseException:  # a bug in sealing: what was being retried stays for the next try
                self._unwritten, self._flushing_rows = retry, 0
                raise
            self._after_seal()
            self._flushing_rows = sum(seg.rows for seg in retry) + segment.rows
            written = 0
            failed = None
            try:
                for seg in retry + [segment]:
                    if (error := self._write_segment(seg)) is None:
                        written += seg.spans
                    else:
                        failed = error
                        self._unwritten.append(seg)
                    self._flushing_rows -= seg.rows
            finally:
                self._flushing_rows = 0
                self._last_flush = time.monotonic()
                self._after_parquet(failed)
            return written

    def _after_seal(self) -> None:
        """Count the seal as a retry of a fault, or as its end."""
        now = time.monotonic()
        with self._stats_lock:
            if self.wal.fault is not None:
                if self._fault_since is None:
                    self._start_fault(now)
                self._next_retry = now + self._retry_delay
                self._retry_delay = min(RETRY_MAX_S, self._retry_delay * 2)
            elif self._fault_since is not None:
                lasted = now - self._fault_since
                self.stats.longest_fault_s = max(self.stats.longest_fault_s, lasted)
                self._fault_since = None
                self._fault_ended = now
                log.warning("the lake takes writes again after %.1f s; accepting requests", lasted)

    def _after_parquet(self, failed: str | None) -> None:
        """Back off while Parquet writes fail; say once that they work again."""
        if failed is not None:
            self._parquet_delay = self.flush_seconds if self._parquet_fault is None else \
                min(PARQUET_RETRY_MAX_S, self._parquet_delay * 2)
            self._parquet_retry_at = time.monotonic() + self._parquet_delay
        elif self._parquet_fault is not None:
            log.warning("writing Parquet to %s works again; the spans kept in the write-ahead log are written",
                        self.lake.root)
            self._parquet_logged = None
        # health reads this without the lock: it changes only here, once the outcome is known
        self._parquet_fault = failed

    def _write_segment(self, segment) -> str | None:
        """Write a sealed segment to Parquet and delete it; None, or why it failed (the
        segment is kept: on disk for the next start's replay, in memory for the next flush)."""
        try:
            if segment.tables:
                if not self.lake.root.is_dir():
                    # writing would make it again; a missing lake may be an unmounted volume
                    raise FileNotFoundError(f"the lake directory {self.lake.root} is gone")
                names = segment.tables[0].keys()
                tables = {n: pa.concat_tables([t[n] for t in segment.tables]) for n in names}
                self.lake.write(tables, token=segment.token, fsync=self.fsync)
                with self._stats_lock:
                    self.stats.spans_written += segment.spans
        except Exception as e:  # any failure, a bug included, keeps the segment for the next flush
            with self._stats_lock:
                self.stats.flush_errors += 1
                self.stats.last_flush_error = str(e)
            if str(e) != self._parquet_logged:  # once per error, not at every retry of every segment
                self._parquet_logged = str(e)
                log.error("writing Parquet to %s failed: %s; the write-ahead log keeps the spans, retrying",
                          self.lake.root, e, exc_info=not isinstance(e, OSError))
            return str(e)
        if segment.path is not None and not self._deleted(segment.path):
            self._undeleted.append(segment.path)
        return None

    @staticmethod
    def _deleted(path: Path, quiet: bool = False) -> bool:
        """Delete a log segment whose rows are in Parquet. One left behind is harmless (a
        replay writes the same files again) but holds compaction back, so it is retried."""
        try:
            path.unlink(missing_ok=True)
            return True
        except OSError as e:
            if not quiet:
                log.warning("cannot delete write-ahead log segment %s after writing it to Parquet: %s; "
                            "retrying at every flush", path, e)
            return False

    @property
    def lost_spans(self) -> int:
        """Acknowledged spans not in Parquet whose log segment is gone too (the lake was
        deleted under the collector): only this process's memory holds them."""
        return sum(seg.spans for seg in self._unwritten if seg.path is None or not seg.path.exists())

    def _flush_loop(self) -> None:
        """The flusher: never dies of an error (each is logged and retried after a pause)."""
        while not self._stop.is_set():
            self._wake.wait(timeout=min(0.25, self.flush_seconds))
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self._tick()
            except Exception:  # a bug: the collector must go on flushing what it acknowledged
                log.exception("the flusher failed; retrying in %.0f s", RETRY_MAX_S)
                self._stop.wait(RETRY_MAX_S)

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._last_check >= CHECK_EVERY_S:
            self._last_check = now
            if self.wal.check() is not None:
                self._note_fault()
        if self.wal.fault is not None:
            if now >= self._next_retry:
                self.flush()
            return
        if self._parquet_fault is not None and now < self._parquet_retry_at:
            return  # the log's buffer fills meanwhile, and the receiver pushes back when it is full
        due = now - self._last_flush >= self.flush_seconds
        if (self.wal.buffered_rows or self._unwritten) and (due or self.wal.buffered_rows >= self._flush_at):
            self.flush()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the flusher, write what is buffered, close the log. Waits at most ``timeout``
        seconds for requests in flight and for the flusher; the last flush is one attempt."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        self._wake.set()
        with self._inflight_cv:  # let acknowledgements already on their way land in the log first
            self._closing = True
            self._inflight_cv.wait_for(lambda: self._inflight == 0, timeout=max(0.0, deadline - time.monotonic()))
        self._flusher.join(timeout=max(0.0, deadline - time.monotonic()))
        self.flush()
        self.wal.close()  # removes the empty segment the last seal opened
