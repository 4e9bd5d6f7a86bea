"""The capture pipeline: tracer provider policy, the assay.* span processor, export, flush.

Policy:

* If the application already set an SDK ``TracerProvider`` as the global provider, our
  processors are *added* to it; it is never replaced, so the application's own exporters
  keep receiving every span (ours included).
* Otherwise we install an SDK ``TracerProvider`` (resource from ``OTEL_SERVICE_NAME`` /
  ``OTEL_RESOURCE_ATTRIBUTES``, plus ``service.version`` from ``OTEL_ASSAY_VERSION``).
* The pipeline is installed lazily, the first time a trial or an adapter needs a tracer,
  so ``import otel_assay.auto`` may come before or after the application configures its
  own provider. It is installed once per process (idempotent, thread-safe).

Export: a BatchSpanProcessor (its queue sized for bursts) hands finished spans, on its own
thread, to ``ParquetSpanExporter`` writing the lake (``OTEL_ASSAY_DIR``, default
``./traces``), or with ``OTEL_ASSAY_EXPORTER=otlp`` (or ``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT``
set and ``OTEL_ASSAY_DIR`` unset) to an OTLP exporter: ending a span on the agent's thread
only queues it. Spans produced and spans written are counted; a gap is logged at flush.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
import uuid
from typing import Any

from opentelemetry import baggage as otel_baggage
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .. import semconv, settings

log = logging.getLogger("otel_assay.capture")

def disabled() -> bool:
    return settings.disabled()


_CONTENT_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CONTENT_OFF = {"no_content", "false", "0", "no", "off"}


def capture_content() -> bool:
    """Message content (prompts, tool arguments/results, outputs) is on unless
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=NO_CONTENT`` (or false/0).
    Read at every model and tool call, so a process may switch it between trials."""
    return os.environ.get(_CONTENT_VAR, "").strip().lower() not in _CONTENT_OFF


# ---------------------------------------------------------------- run id / trial registry
_RUN_ID_FROM_ENV = settings.run_id() is not None
_RUN_ID = settings.run_id() or uuid.uuid4().hex


def run_id() -> str:
    """One id per process (a forked child gets its own), or ``OTEL_ASSAY_RUN_ID``."""
    return _RUN_ID


# trace_id -> assay.* attributes of the trial that owns the trace. The span processor looks
# spans up here first (a dict lookup), then in baggage (spans in other processes or in
# contexts that carry baggage but whose trace started elsewhere).
_ACTIVE_TRACES: dict[int, dict[str, Any]] = {}


def register_trace(trace_id: int, attrs: dict[str, Any]) -> None:
    _ACTIVE_TRACES[trace_id] = attrs


def unregister_trace(trace_id: int) -> None:
    _ACTIVE_TRACES.pop(trace_id, None)


def active_trace_attrs(trace_id: int) -> dict[str, Any] | None:
    return _ACTIVE_TRACES.get(trace_id)


def _trial_attributes(trace_id: int, parent_context: otel_context.Context | None) -> dict[str, Any] | None:
    """The assay.* attributes a span of ``trace_id`` takes: its trial's, or those propagated
    in the baggage of ``parent_context`` (None: the current context); None when there are none."""
    attrs = _ACTIVE_TRACES.get(trace_id)
    if attrs is not None:
        return attrs or None
    bag = otel_baggage.get_all(parent_context)
    if not bag:
        return None
    attrs = {}
    for key in semconv.ASSAY_PROPAGATED:
        v = bag.get(key)
        if v is not None:
            # isdecimal, not isdigit: int() refuses digits such as "²" that isdigit accepts
            attrs[key] = int(v) if key == semconv.ASSAY_TRIAL_INDEX and str(v).isdecimal() else v
    return attrs or None


# ---------------------------------------------------------------- processors
class AssayAttributesProcessor(SpanProcessor):
    """Copies the trial's assay.* attributes onto every span that starts inside it,
    including spans of other instrumentation (processors are provider-wide). Also counts
    the sampled spans that end (spans produced), so a gap to the spans written can be
    reported instead of going unnoticed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended = 0

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        attrs = _trial_attributes(span.get_span_context().trace_id, parent_context)
        if attrs is not None:
            span.set_attributes(attrs)

    def on_end(self, span: ReadableSpan) -> None:
        # only sampled spans are exported: an unsampled one (a sampler that records without
        # sampling) is no span lost
        if span.context.trace_flags.sampled:
            with self._lock:
                self._ended += 1

    def reset_count(self) -> None:
        with self._lock:
            self._ended = 0

    @property
    def spans_ended(self) -> int:
        return self._ended

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        # nothing held here; opentelemetry-sdk 1.30's base returns None, which the
        # provider's force_flush takes for a processor that failed to flush
        return True


class LakeExporter(SpanExporter):
    """The span exporter behind our BatchSpanProcessor when spans go to the Parquet lake: it
    passes each batch to the current ``ParquetSpanExporter`` (``target``), which
    :func:`use_lake` may replace between trials. A processor cannot be removed from an SDK
    provider, so the lake is switched here rather than by adding a second processor."""

    def __init__(self, target) -> None:
        self.target = target

    def export(self, spans) -> SpanExportResult:
        return self.target.export(spans)

    def shutdown(self) -> None:
        self.target.shutdown()


_BURST_QUEUE = 262144  # spans held for the worker thread: far above any agent's burst
_BATCH = 4096
_DELAY_MS = 1000


def _env_positive(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value > 0:
        return value
    log.warning("otel-assay: %s=%r is not a positive integer; using %d", name, raw, default)
    return default


def batch_processor(exporter: SpanExporter) -> BatchSpanProcessor:
    """The SDK's BatchSpanProcessor around ``exporter``: ending a span only queues it, and
    the exporter converts and sends spans on the processor's own thread, off the agent's.

    The SDK's default queue (2048 spans) drops spans in a burst (a parallel fan-out of tool
    calls, a long run flushed at once), so the queue is sized far above any burst and
    batches go out every second, unless the standard ``OTEL_BSP_MAX_QUEUE_SIZE``,
    ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` and ``OTEL_BSP_SCHEDULE_DELAY`` say otherwise. A span
    the queue still drops is counted as produced and not written, and reported at flush."""
    queue = _env_positive("OTEL_BSP_MAX_QUEUE_SIZE", _BURST_QUEUE)
    # the SDK refuses a batch larger than the queue
    batch = min(queue, _env_positive("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", _BATCH))
    delay = _env_positive("OTEL_BSP_SCHEDULE_DELAY", _DELAY_MS)
    return BatchSpanProcessor(exporter, max_queue_size=queue, max_export_batch_size=batch,
                              schedule_delay_millis=delay)


# ---------------------------------------------------------------- the pipeline
class Pipeline:
    """What capture installed: the provider, our two processors and the exporter (the
    ``ParquetSpanExporter`` of the current lake, or the OTLP exporter)."""

    def __init__(self, provider: TracerProvider, owned: bool, exporter, export_processor,
                 attrs_processor: AssayAttributesProcessor, kind: str, target: str | None,
                 lake: LakeExporter | None = None):
        self.provider = provider
        self.owned = owned  # True if we created the provider
        self.exporter = exporter
        self.export_processor = export_processor
        self.attrs_processor = attrs_processor
        self.kind = kind  # "parquet" | "otlp"
        self.target = target
        self.lake = lake  # the Parquet lake's LakeExporter (None for OTLP)
        self._tracers: dict[str, trace.Tracer] = {}
        self.retired: dict[str, int] = {}  # counters of exporters replaced by use_lake()

    def tracer(self, name: str = "otel_assay") -> trace.Tracer:
        t = self._tracers.get(name)
        if t is None:
            from .. import __version__
            t = self._tracers[name] = self.provider.get_tracer(name, __version__)
        return t

    def stats(self) -> dict[str, Any]:
        ex = self.exporter
        out = {"exporter": self.kind, "target": self.target,
               "spans_produced": self.attrs_processor.spans_ended}
        for k in ("spans_received", "spans_written", "spans_rejected", "spans_lost"):
            if hasattr(ex, k):
                out[k] = getattr(ex, k) + self.retired.get(k, 0)
        return out


_LOCK = threading.RLock()
_PIPELINE: Pipeline | None = None
_ATEXIT_REGISTERED = False
_NOOP_TRACER = trace.NoOpTracer()


def exporter_kind() -> str:
    kind = settings.exporter()
    if kind in settings.EXPORTERS:
        return kind
    if kind:
        log.warning("otel-assay: OTEL_ASSAY_EXPORTER=%r is not 'parquet' or 'otlp'; using parquet", kind)
        return "parquet"
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if endpoint and settings.text(settings.DIR) is None:
        return "otlp"
    return "parquet"


def _make_export(kind: str, lake: str | os.PathLike | None = None):
    """``(exporter, processor, target, lake)``: the exporter spans go to, the
    BatchSpanProcessor around it, where the spans go (for the log and :func:`stats`) and,
    for the Parquet lake, the LakeExporter that :func:`use_lake` switches."""
    if kind == "otlp":
        protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip().lower()
        # imported here, not at the top: the exporters load grpc or requests, which a process
        # writing the Parquet lake never needs
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter()
        target = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                  or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "(default endpoint)")
        return exporter, batch_processor(exporter), target, None
    # imported here, not at the top: it loads pyarrow (a tenth of a second at start-up),
    # which a process exporting over OTLP never needs
    from ..collect.exporter import ParquetSpanExporter
    directory = lake if lake is not None else settings.lake_dir()
    # the default lake appears with the first span: importing otel_assay.auto in a module
    # that `otel-assay run --dir X` loads must not leave an empty ./traces behind
    exporter = ParquetSpanExporter(directory, create=lake is not None)
    lake_exporter = LakeExporter(exporter)
    return exporter, batch_processor(lake_exporter), os.path.abspath(directory), lake_exporter


def _new_provider() -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    attrs: dict[str, Any] = {}
    version = settings.version()
    if version:
        attrs[semconv.SERVICE_VERSION] = version
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
    return TracerProvider(resource=Resource.create(attrs))


def pipeline() -> Pipeline | None:
    """The installed pipeline, installing it on first use; None when disabled."""
    p = _PIPELINE
    if p is not None:
        return p
    if disabled():
        return None
    return _install()


def _install(lake: str | os.PathLike | None = None) -> Pipeline | None:
    """Install the pipeline; ``lake`` (from :func:`use_lake`) means Parquet into that lake."""
    global _PIPELINE, _ATEXIT_REGISTERED
    with _LOCK:
        if _PIPELINE is not None:
            return _PIPELINE
        current = trace.get_tracer_provider()
        owned = False
        if isinstance(current, TracerProvider):
            provider = current
        else:
            provider = _new_provider()
            trace.set_tracer_provider(provider)
            if trace.get_tracer_provider() is not provider:
                # someone set a non-SDK provider we cannot attach to: keep ours private
                log.warning("otel-assay: the global tracer provider (%s) is not an SDK TracerProvider; "
                            "otel-assay records only its own spans", type(current).__name__)
            owned = True
        kind = "parquet" if lake is not None else exporter_kind()
        if kind == "otlp" and not owned and settings.exporter() is None:
            # an OTLP endpoint in the environment configures the application's own exporter (or
            # opentelemetry-instrument's), which already sends every span of its provider there,
            # ours included with their assay.* attributes: a second OTLP exporter on the same
            # provider sent each span, the application's too, twice. Asked for by name
            # (OTEL_ASSAY_EXPORTER=otlp), it is still added
            kind = "parquet"
        exporter, export_processor, target, lake_exporter = _make_export(kind, lake)
        # first: the trial's attributes are on a span before any later processor sees it
        attrs_processor = AssayAttributesProcessor()
        provider.add_span_processor(attrs_processor)
        provider.add_span_processor(export_processor)
        _PIPELINE = Pipeline(provider, owned, exporter, export_processor, attrs_processor, kind, target,
                             lake_exporter)
        if not _ATEXIT_REGISTERED:
            atexit.register(_at_exit)
            _ATEXIT_REGISTERED = True
        mp = sys.modules.get("multiprocessing")
        if mp is not None and mp.parent_process() is not None:
            _in_multiprocessing_child()  # installed inside a worker (spawned, or forked before install)
        log.debug("otel-assay: capturing to %s (%s, provider %s)", target, kind, "ours" if owned else "the application's")
        return _PIPELINE


def tracer(name: str = "otel_assay") -> trace.Tracer:
    p = _PIPELINE
    if p is None:
        p = pipeline()
        if p is None:
            return _NOOP_TRACER
    return p.tracer(name)


# callbacks run when a trial ends, before its root span does (trace_id, exception or None):
# adapters end the steps of the trial still open (cut off without a callback)
_TRIAL_END: list = []


def add_trial_end(fn) -> None:
    if fn not in _TRIAL_END:
        _TRIAL_END.append(fn)


def trial_ended(trace_id: int, exc: BaseException | None) -> None:
    for fn in list(_TRIAL_END):
        try:
            fn(trace_id, exc)
        except Exception:
            log.exception("otel-assay: ending the open steps of a trial failed")


# callbacks run before a flush (e.g. CrewAI's event bus must deliver pending events first)
_PRE_FLUSH: list = []


def add_pre_flush(fn) -> None:
    if fn not in _PRE_FLUSH:
        _PRE_FLUSH.append(fn)


def flush(timeout_s: float = 30.0) -> bool:
    """Write everything captured so far (adapters' pending work, then the exporter).

    Returns True when every span produced so far was written (or sent)."""
    for fn in list(_PRE_FLUSH):
        try:
            fn(timeout_s)
        except Exception:
            log.exception("otel-assay: pre-flush hook failed")
    p = _PIPELINE
    if p is None:
        return True
    # the processor hands every queued span to the exporter, on this thread (after any export
    # its worker is doing); the exporter then writes what it holds. A BatchSpanProcessor's
    # force_flush does not flush its exporter, so both are asked
    deadline = time.monotonic() + timeout_s
    ok = p.export_processor.force_flush(int(timeout_s * 1000))
    ok = p.exporter.force_flush(max(0, int((deadline - time.monotonic()) * 1000))) and ok
    s = p.stats()
    if "spans_written" in s:
        gap = s["spans_produced"] - s["spans_written"] - s.get("spans_rejected", 0)
        if gap > 0:
            log.warning("otel-assay: %d spans produced but not written to %s (written %d, rejected %d)%s",
                        gap, p.target, s["spans_written"], s.get("spans_rejected", 0),
                        f": {p.exporter.last_error}" if getattr(p.exporter, "last_error", None) else "")
            ok = False
    return bool(ok)


def use_lake(directory: str | os.PathLike) -> None:
    """Send spans from now on to the lake at ``directory`` (after writing what the previous
    lake had buffered). For drivers that write several lakes from one process, e.g. a
    baseline and a candidate; call it between trials, not during one. Before any capture
    has started it installs the pipeline writing there: a lake asked for by name wins over
    ``OTEL_ASSAY_DIR`` and an OTLP endpoint in the environment."""
    if _PIPELINE is None:
        if not disabled():
            _install(lake=directory)
        return
    p = _PIPELINE
    if p.kind != "parquet":
        log.warning("otel-assay: use_lake(%s) ignored: exporting to OTLP", directory)
        return
    with _LOCK:
        target = os.path.abspath(directory)
        if target == p.target:
            return
        for fn in list(_PRE_FLUSH):
            fn(30.0)
        # every span queued so far belongs to the previous lake
        p.export_processor.force_flush()
        from ..collect.exporter import ParquetSpanExporter  # see _make_export
        new = ParquetSpanExporter(directory)
        old = p.exporter
        p.lake.target = new
        p.exporter, p.target = new, target
        old.shutdown()
        for k in ("spans_received", "spans_written", "spans_rejected", "spans_lost"):
            p.retired[k] = p.retired.get(k, 0) + getattr(old, k, 0)


def stats() -> dict[str, Any]:
    """Counters of the capture pipeline: spans produced, received, written, rejected."""
    p = _PIPELINE
    return p.stats() if p is not None else {"exporter": None, "spans_produced": 0}


def _at_exit() -> None:
    try:
        flush()
    except Exception:  # pragma: no cover
        log.exception("otel-assay: flush at exit failed")


# ---------------------------------------------------------------- fork
_FLUSH_EACH_TRIAL = False  # set in multiprocessing.Pool workers
_CHILD_HOOKED_PID: int | None = None


def flush_each_trial() -> bool:
    return _FLUSH_EACH_TRIAL


def _in_multiprocessing_child(_pipeline=None) -> None:
    """Flush on the way out of a multiprocessing child, which ends with os._exit: atexit
    handlers never run there, multiprocessing's own finalizers do."""
    global _CHILD_HOOKED_PID, _FLUSH_EACH_TRIAL
    if _CHILD_HOOKED_PID == os.getpid():
        return
    _CHILD_HOOKED_PID = os.getpid()
    import multiprocessing
    import multiprocessing.util
    # above the pool's and queues' finalizers (15, 10): write while the worker is intact
    multiprocessing.util.Finalize(None, _at_exit, exitpriority=20)
    # Pool.terminate() (what ``with Pool() as p:`` does on exit) SIGTERMs its workers, so
    # no exit hook runs there: a pool worker writes each trial when it ends. A Pool names
    # its worker processes after their class, "Process" made "PoolWorker" (ForkPoolWorker-1)
    _FLUSH_EACH_TRIAL = "PoolWorker" in multiprocessing.current_process().name


def _after_fork_in_child() -> None:
    global _LOCK, _RUN_ID
    # the child is another process: its own run id (unless the user set one for all), so its
    # auto-indexed trials (counters restart, see trial.py) do not collide with the parent's
    # or its siblings' under the same (run_id, scenario, version, index)
    if not _RUN_ID_FROM_ENV:
        _RUN_ID = uuid.uuid4().hex
    _LOCK = threading.RLock()  # another thread may have held it at the fork
    p = _PIPELINE
    if p is None:
        return  # installed by the child itself, which then hooks its exit (see _install)
    # the exporter dropped the parent's buffered spans (and a BatchSpanProcessor its queue):
    # count only the child's spans, or every flush would report the parent's as missing
    p.attrs_processor.reset_count()
    p.retired = {}
    mpu = sys.modules.get("multiprocessing.util")
    if mpu is not None:
        # multiprocessing clears its finalizers in the child after this hook runs and then
        # calls its after-fork callbacks: register the exit flush from there
        mpu.register_after_fork(p, _in_multiprocessing_child)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
