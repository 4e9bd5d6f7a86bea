"""``ParquetSpanExporter``: an OpenTelemetry SpanExporter that writes the span lake."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any, Iterable, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .. import settings
from ..lake.files import Lake, LakeError
from ..lake.rows import Resource, SpanBatch, make_resource
from ..lake.schema import DEFAULT_LIMITS, Limits

log = logging.getLogger("otel_assay.collect")

def _items(attributes) -> Iterable[tuple[str, Any]]:
    """The (key, value) pairs of SDK attributes. A span's ``attributes`` is a read-only proxy
    of the SDK's BoundedAttributes, whose generic ``items()`` costs two Python calls per key;
    its ``copy()`` is a plain dict, iterated in C (a third of the conversion's time)."""
    if not attributes:
        return ()
    try:
        return attributes.copy().items()
    except AttributeError:  # a mapping of other code, without copy()
        return attributes.items()


def _trace_state(state) -> str | None:
    return state.to_header() or None if state else None


def sdk_span_record(span: ReadableSpan, resource: Resource) -> dict:
    """An SDK ``ReadableSpan`` as the row builder's keyword record, read through the SDK's
    public properties only.

    The SDK numbers SpanKind from 0 (INTERNAL); OTLP and the lake reserve 0 for
    UNSPECIFIED, so the kind is shifted by one. Dropped counts are the SDK's own (what its
    span limits cut), to which the row builder adds what the lake's limits cut. An id out
    of range or negative formats as text that is no id of the right length, which the row
    builder rejects.
    """
    ctx = span.context
    parent = span.parent
    status = span.status
    scope = span.instrumentation_scope
    return dict(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        parent_span_id=format(parent.span_id, "016x") if parent is not None and parent.span_id else None,
        name=span.name or "",
        kind=span.kind.value + 1,
        start_time_unix_nano=span.start_time or 0,
        end_time_unix_nano=span.end_time or 0,
        status_code=status.status_code.value,
        status_message=status.description or None,
        trace_state=_trace_state(ctx.trace_state),
        scope_name=scope.name if scope else None,
        scope_version=scope.version if scope else None,
        resource=resource,
        attributes=_items(span.attributes),
        events=[(e.timestamp or 0, e.name, _items(e.attributes), e.dropped_attributes) for e in span.events],
        links=[(format(l.context.trace_id, "032x"), format(l.context.span_id, "016x"), _trace_state(l.context.trace_state),
                _items(l.attributes), l.dropped_attributes)
               for l in span.links],
        dropped_attributes_count=span.dropped_attributes,
        dropped_events_count=span.dropped_events,
        dropped_links_count=span.dropped_links,
    )


class ParquetSpanExporter(SpanExporter):
    """Buffer finished spans and write them to the lake as Parquet files.

    ``export`` converts spans to rows as they come (behind a ``BatchSpanProcessor`` on its
    worker thread, off the application's); a span that cannot be read is counted in
    ``spans_rejected``.

    A file is written when ``max_rows`` spans are buffered or the oldest buffered span is
    ``max_age_s`` old (a background thread checks), on ``force_flush()`` and on
    ``shutdown()``. Works behind a ``BatchSpanProcessor`` or a ``SimpleSpanProcessor``;
    every method is thread-safe.

    Defaults come from ``OTEL_ASSAY_FLUSH_ROWS`` (100000) and ``OTEL_ASSAY_FLUSH_SECONDS``
    (5). ``spans_received``, ``spans_written`` and ``spans_rejected`` count what happened,
    so a gap between spans produced and spans stored can be reported, never silent.

    If a write fails (disk full, permissions) the rows stay buffered and the next flush
    retries. Rows are discarded (and counted in ``spans_lost``) only when ``shutdown``
    cannot write them, or when more than ``max_unwritten_spans`` (default
    ``OTEL_ASSAY_MAX_UNWRITTEN_SPANS``, 500000) wait for a write that keeps failing: then
    the oldest flushes are dropped, whole, until the rest fit (the newest is always kept),
    with one warning per outage. The lake's directories are created (and checked) at
    construction; with ``create=False`` at the first write, so an exporter that never
    receives a span leaves nothing on disk.

    Fork-safe: a forked child starts with an empty buffer and zeroed counters (the parent
    writes the spans it buffered; the child would write them a second time) and starts
    its own flush thread on its first span (threads do not survive a fork).
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        max_rows: int | None = None,
        max_age_s: float | None = None,
        limits: Limits = DEFAULT_LIMITS,
        fsync: bool = True,
        create: bool = True,
        max_unwritten_spans: int | None = None,
    ):
        self.lake = Lake(directory)
        if create:  # fail now, not at the first flush, on a directory that cannot be written
            self.lake.ensure_writable()
        self.max_rows = max_rows or settings.flush_rows()
        self.max_age_s = max_age_s if max_age_s is not None else settings.flush_seconds()
        self.max_unwritten_spans = max_unwritten_spans or settings.max_unwritten_spans()
        self.limits = limits
        self.fsync = fsync
        self._resources: dict[int, tuple[object, Resource]] = {}
        self._shutdown = False
        self._reset()
        self._start_timer()
        if hasattr(os, "register_at_fork"):
            # weak: the hook cannot be unregistered and must not keep the exporter alive
            reinit = weakref.WeakMethod(self._reset)
            os.register_at_fork(after_in_child=lambda: (m := reinit()) is not None and m())

    # ----------------------------------------------------------- SpanExporter API
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            if self._shutdown:  # checked under the lock: shutdown's last flush takes all that got in
                return SpanExportResult.FAILURE
            if self._timer is None:  # first span in a forked child
                self._start_timer()
            self.spans_received += len(spans)
            if self._oldest is None and spans:  # before the rows: an interrupt may leave some
                self._oldest = time.monotonic()
            self._add(spans)
            full = len(self._batch) >= self.max_rows
        if full:
            self._flush()
        return SpanExportResult.SUCCESS

    def _add(self, spans: Sequence[ReadableSpan]) -> None:
        """Turn exported spans into rows (with ``_lock`` held). A span that cannot be read
        (one built by other code than the SDK: no context, a value whose text fails) is
        rejected and counted; the others are stored. An interrupt (Ctrl-C, an exit) stops
        the conversion: the spans it did not reach are counted lost, so that every span
        received is written, rejected or lost."""
        batch = self._batch
        before = batch.rejected
        done = 0
        try:
            for span in spans:
                try:
                    record = sdk_span_record(span, self._resource(span.resource))
                except Exception as e:
                    batch.reject(f"unreadable span: {type(e).__name__}: {str(e)[:200]}")
                else:
                    batch.add_span(**record)  # takes its rows back if interrupted
                done += 1
        except BaseException:
            self.spans_lost += len(spans) - done
            raise
        finally:
            self.spans_rejected += batch.rejected - before

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._flush()

    def shutdown(self) -> None:
        with self._lock:
            if self._shutdown:
                return
            # before the last flush: a span exported during it was accepted and never written
            self._shutdown = True
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=5)
        interrupted = None
        try:
            ok = self._flush()
        except KeyboardInterrupt as e:  # Ctrl-C during the last flush: what it did not write is lost
            ok, interrupted = False, e
            self.last_error = "interrupted (Ctrl-C)"
        if not ok:
            with self._write_lock, self._lock:  # the order _flush takes them in
                lost = len(self._batch) + sum(n for _t, n in self._unwritten)
                self.spans_lost += lost
                log.error("otel-assay: %d spans could not be written to %s: %s", lost, self.lake.root, self.last_error)
                self._batch = SpanBatch(self.limits)
                self._unwritten = []
        if interrupted is not None:
            raise interrupted

    # ----------------------------------------------------------- internals
    def _start_timer(self) -> None:
        self._timer = threading.Thread(target=self._age_flusher, name="otel-assay-parquet-flush", daemon=True)
        self._timer.start()

    def _reset(self) -> None:
        """A new exporter's state, and a forked child's: only the forking thread survives a
        fork, so locks another thread held would stay held, the flush thread is gone (the
        child's first export() starts its own), and the buffered rows are the parent's to write."""
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._batch = SpanBatch(self.limits)
        # (tables, rows) of flushes whose write failed, oldest first: rewritten before anything
        # newer at the next flush, so spans that arrive while a write is failing wait their turn
        self._unwritten: list[tuple[dict, int]] = []
        self._dropping = False  # spans were dropped in this outage (warned once)
        self._oldest: float | None = None
        self.spans_received = self.spans_written = self.spans_rejected = self.spans_lost = 0
        self.files_written = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None

    def _resource(self, res) -> Resource:
        hit = self._resources.get(id(res))
        if hit is not None and hit[0] is res:
            return hit[1]
        prepared = make_resource(res.attributes.items() if res is not None else (), self.limits)
        if len(self._resources) > 64:
            self._resources.clear()
        self._resources[id(res)] = (res, prepared)
        return prepared

    def _flush(self) -> bool:
        with self._write_lock:
            n = 0  # set with the detach, in one step: an interrupt after it is counted below
            try:
                with self._lock:
                    batch = self._batch
                    if len(batch):
                        self._batch = SpanBatch(self.limits)
                        n = len(batch)
                    self._oldest = None  # nothing is buffered now
                if n:
                    tables = batch.tables()
            except BaseException as e:
                if not n:
                    raise
                # a defect in building the tables (or Ctrl-C meanwhile): these spans are
                # lost (and counted), the flushes waiting before them and the spans after
                # them are not
                with self._lock:
                    self.spans_lost += n
                self.last_error = f"{type(e).__name__}: {e}"
                log.error("otel-assay: %d spans could not be made into tables (%s); they are lost", n, self.last_error)
                if not isinstance(e, Exception):
                    raise
            else:
                if n:
                    self._unwritten.append((tables, n))
                    self._bound_unwritten()
            while self._unwritten:
                tables, n = self._unwritten[0]
                try:
                    self.lake.write(tables, fsync=self.fsync)
                except (OSError, LakeError) as e:
                    # the rows stay in _unwritten: putting them back into the buffer (and
                    # writing what arrived meanwhile at once) lost that second part when its
                    # write failed too, as it does on a full disk
                    self.last_error = str(e)
                    log.warning("otel-assay: writing %d spans to %s failed (%s); will retry",
                                sum(m for _t, m in self._unwritten), self.lake.root, e)
                    with self._lock:
                        self._oldest = self._oldest or time.monotonic()  # the age flusher retries
                    return False
                self._unwritten.pop(0)
                self.spans_written += n
                self.files_written += 1
            self._dropping = False
            return True

    def _bound_unwritten(self) -> None:
        """Drop the oldest failed flushes while more than ``max_unwritten_spans`` wait: a lake
        that stays unwritable must not take the application's memory with it."""
        held = sum(n for _t, n in self._unwritten)
        dropped = 0
        while len(self._unwritten) > 1 and held > self.max_unwritten_spans:
            _t, n = self._unwritten.pop(0)
            held -= n
            dropped += n
        if not dropped:
            return
        with self._lock:
            self.spans_lost += dropped
        if not self._dropping:
            self._dropping = True
            log.warning("otel-assay: writing to %s keeps failing (%s); more than %d spans waited, so the oldest "
                        "are being dropped (counted in spans_lost) until a write succeeds",
                        self.lake.root, self.last_error, self.max_unwritten_spans)

    def _age_flusher(self) -> None:
        interval = max(0.05, min(1.0, self.max_age_s / 4))
        while not self._stop.wait(interval):
            oldest = self._oldest
            if oldest is not None and time.monotonic() - oldest >= self.max_age_s:
                try:
                    self._flush()
                except Exception:  # the thread must outlive one bad flush, or nothing is written by age again
                    log.exception("otel-assay: flushing spans to %s failed", self.lake.root)
