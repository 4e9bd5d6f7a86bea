"""The capture pipeline: tracer provider policy, the assay.* span processor, export, flush.

Policy (DESIGN §2/§4):

* If the application already set an SDK ``TracerProvider`` as the global provider, our
  processors are *added* to it; it is never replaced, so the application's own exporters
  keep receiving every span (ours included).
* Otherwise we install an SDK ``TracerProvider`` (resource from ``OTEL_SERVICE_NAME`` /
  ``OTEL_RESOURCE_ATTRIBUTES``, plus ``service.version`` from ``OTEL_ASSAY_VERSION``).
* The pipeline is installed lazily, the first time a trial or an adapter needs a tracer,
  so ``import otel_assay.auto`` may come before or after the application configures its
  own provider. It is installed once per process (idempotent, thread-safe).

Export: to the Parquet lake (``OTEL_ASSAY_DIR``, default ``./traces``) through a
processor that hands each finished span straight to ``ParquetSpanExporter`` (which only
buffers; files are written by its own flush thread), so a burst can never be dropped; or,
with ``OTEL_ASSAY_EXPORTER=otlp`` (or ``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT`` set and
``OTEL_ASSAY_DIR`` unset), to an OTLP endpoint behind a BatchSpanProcessor whose queue is
sized for bursts. Spans produced and spans written are counted; a gap is logged at flush.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import sys
import threading
import uuid
from threading import get_ident
from time import time_ns
from typing import Any

from opentelemetry import baggage as otel_baggage
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.sdk.util import BoundedList

from .. import semconv

log = logging.getLogger("otel_assay.capture")

_TRUE = {"1", "true", "yes", "on"}
_SAMPLED = trace.TraceFlags.SAMPLED
_RECORD_AND_SAMPLE = Decision.RECORD_AND_SAMPLE


def disabled() -> bool:
    return os.environ.get("OTEL_ASSAY_DISABLED", "").strip().lower() in _TRUE


def pure_python() -> bool:
    """``OTEL_ASSAY_PURE_PYTHON=1``: capture's compiled helpers (``_capturec``) stay unused.
    Read when capture's modules are imported."""
    return os.environ.get("OTEL_ASSAY_PURE_PYTHON", "") in ("1", "true")


_CONTENT_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# os.environ keeps its values in a dict of its own (encoded), in which every change through
# os.environ replaces the value: a value object seen before means the same setting. Reading
# os.environ.get takes four Python calls, on every model and tool call. (Checked against the
# os.environ of the time: code may replace os.environ itself.)
_ENV = os.environ
_ENV_DATA = getattr(_ENV, "_data", None)
_ENV_KEY = _ENV.encodekey(_CONTENT_VAR) if isinstance(_ENV_DATA, dict) else None
_content_seen: tuple[Any, bool] = (object(), True)  # (value object in _ENV_DATA, what it means)


def capture_content() -> bool:
    """Message content (prompts, tool arguments/results, outputs) is on unless
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=NO_CONTENT`` (or false/0)."""
    global _content_seen
    known = _ENV_KEY is not None and os.environ is _ENV
    if known:
        raw = _ENV_DATA.get(_ENV_KEY)
        seen = _content_seen
        if raw is seen[0]:
            return seen[1]
    v = os.environ.get(_CONTENT_VAR, "").strip().lower()
    on = v not in {"no_content", "false", "0", "no", "off"}
    if known:
        _content_seen = (raw, on)
    return on


# ---------------------------------------------------------------- run id / trial registry
_RUN_ID_FROM_ENV = bool(os.environ.get("OTEL_ASSAY_RUN_ID"))
_RUN_ID = os.environ.get("OTEL_ASSAY_RUN_ID") or uuid.uuid4().hex


def run_id() -> str:
    """One id per process (a forked child gets its own), or ``OTEL_ASSAY_RUN_ID``."""
    return _RUN_ID


# trace_id -> (assay.* attributes of the trial that owns the trace, their _longest_text).
# The span processor looks spans up here first (a dict lookup), then in baggage (spans in
# other processes or in contexts that carry baggage but whose trace started elsewhere).
_ACTIVE_TRACES: dict[int, tuple[dict[str, Any], int]] = {}


def register_trace(trace_id: int, attrs: dict[str, Any]) -> None:
    _ACTIVE_TRACES[trace_id] = (attrs, _longest_text(attrs))


def unregister_trace(trace_id: int) -> None:
    _ACTIVE_TRACES.pop(trace_id, None)


def active_trace_attrs(trace_id: int) -> dict[str, Any] | None:
    entry = _ACTIVE_TRACES.get(trace_id)
    return entry[0] if entry is not None else None


def _longest_text(attrs: dict[str, Any]) -> int:
    """The length of the longest string in ``attrs``, or -1 unless every key is a non-empty
    str and every value a str, int or bool (exact types, which a trial's attributes are):
    the values every SDK since 1.30 stores as they are, short of truncating a long string.
    Versions differ on the rest (1.30 decodes bytes, drops None, makes a str subclass a str)."""
    longest = 0
    for k, v in attrs.items():
        if type(k) is not str or not k:
            return -1
        t = type(v)
        if t is str:
            longest = max(longest, len(v))
        elif t is not int and t is not bool:
            return -1
    return longest


_SDK_SPANS = {Span, getattr(sdk_trace, "_Span", Span)}


# thread id -> [name, start time, attributes] of the span ``_spans.start_span`` is starting on
# that thread, for our processor's ``on_start`` to set (see starter): only on the span of that
# name object and start time, for other spans may start in between (a garbage collector
# callback, an id generator; another start_span saves and restores the entry), and the
# attributes are set to None once taken. Not a threading.local: a thread's first use of one
# costs as much as the span (LangGraph runs each tool in a new thread)
PENDING: dict[int, list] = {}


def _add_attributes(span: Span, attrs: dict[str, Any], longest: int | None) -> bool:
    """``span.set_attributes(attrs)`` for a span the SDK is starting, done directly on its
    attribute dict, where that gives the same attributes: ``set_attributes`` cleans each
    value and takes two locks, a quarter of what the SDK spends on a whole span. False
    (nothing done) when it would not: a span class other than the SDK's own (or an SDK
    whose spans lack these fields), a key already set (the SDK moves it to the end), a
    value the cleaning may change or would truncate (``longest``, see _longest_text; None:
    values already in the SDK's form, of unknown length), or no room left (the SDK drops the
    oldest)."""
    if (longest is not None and longest < 0) or type(span) not in _SDK_SPANS:
        return False
    try:
        bounded = span._attributes
        if type(bounded) is not BoundedAttributes:
            return False
        limit, room = bounded.max_value_len, bounded.maxlen
        if limit is not None and (longest is None or longest > limit):
            return False
        # the locks set_attributes takes, in its order: another thread (a processor of its
        # own) may end the span meanwhile
        with span._lock:
            if span._end_time is not None or bounded._immutable:
                return False
            with bounded._lock:
                d = bounded._dict
                if (room is not None and len(d) + len(attrs) > room) or not d.keys().isdisjoint(attrs):
                    return False
                d.update(attrs)
        return True
    except AttributeError:
        return False


def _trial_attributes(trace_id: int, parent_context: otel_context.Context | None) -> tuple[dict[str, Any], int] | None:
    """The assay.* attributes a span of ``trace_id`` takes (its trial's, or those propagated
    in the baggage of ``parent_context``, None: the current context) and their
    ``_longest_text``; None when there are none."""
    entry = _ACTIVE_TRACES.get(trace_id)
    if entry is not None:
        return entry if entry[0] else None
    bag = otel_baggage.get_all(parent_context)
    if not bag:
        return None
    attrs = {}
    for key in semconv.ASSAY_PROPAGATED:
        v = bag.get(key)
        if v is not None:
            # isdecimal, not isdigit: int() refuses digits such as "²" that isdigit accepts
            attrs[key] = int(v) if key == semconv.ASSAY_TRIAL_INDEX and str(v).isdecimal() else v
    return (attrs, _longest_text(attrs)) if attrs else None


# ---------------------------------------------------------------- processors
class AssayAttributesProcessor(SpanProcessor):
    """Copies the trial's assay.* attributes onto every span that starts inside it,
    including spans of other instrumentation (processors are provider-wide). Also counts
    spans produced, so a gap to spans written can be reported."""

    def __init__(self) -> None:
        self._ended = itertools.count()  # next() on a C counter is atomic under the GIL

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        mine = PENDING.get(get_ident()) if PENDING else None
        if (mine is not None and mine[2] is not None and type(span) in _SDK_SPANS and span._name is mine[0]
                and span._start_time == mine[1]):  # the span our start_span is starting (see starter)
            pending, mine[2] = mine[2], None
            if not _add_attributes(span, pending, None):
                span.set_attributes(pending)
        entry = _trial_attributes(span.context[0], parent_context)  # SpanContext is a tuple: (trace_id, ...)
        if entry is not None and not _add_attributes(span, *entry):
            span.set_attributes(entry[0])

    def on_end(self, span: ReadableSpan) -> None:
        next(self._ended)

    def reset_count(self) -> None:
        self._ended = itertools.count()

    @property
    def spans_ended(self) -> int:
        return int(repr(self._ended)[6:-1])  # "count(N)": read without consuming

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class DirectExportProcessor(AssayAttributesProcessor):
    """Hands each sampled, finished span to the exporter on the calling thread, and does
    what AssayAttributesProcessor does: one processor instead of two, so the SDK makes one
    Python call per span start and end, not two (a tenth of capture's own cost per span).

    For ``ParquetSpanExporter`` ``export`` only holds the span in memory (it converts held
    spans to rows in batches; files are written by the exporter's flush thread or when
    ``max_rows`` is reached), so this never drops a span, whatever the burst, and costs
    less than a queue hand-off.
    """

    def __init__(self, exporter) -> None:
        super().__init__()
        self.exporter = exporter
        self._done = False

    def on_end(self, span: ReadableSpan) -> None:
        next(self._ended)
        # SpanContext is a tuple (trace_id, span_id, is_remote, trace_flags, ...): indexed, not
        # read through properties (nor ``context``, the field's), a Python call each on every span
        if self._done or not span._context[3] & _SAMPLED:
            return
        try:
            self.exporter.export((span,))
        except Exception:  # never let export break the agent
            log.exception("otel-assay: exporting a span failed")

    def shutdown(self) -> None:
        if not self._done:
            self._done = True
            self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


# ---------------------------------------------------------------- the pipeline
class Pipeline:
    def __init__(self, provider: TracerProvider, owned: bool, exporter, export_processor,
                 attrs_processor: AssayAttributesProcessor, kind: str, target: str | None):
        self.provider = provider
        self.owned = owned  # True if we created the provider
        self.exporter = exporter
        self.export_processor = export_processor
        self.attrs_processor = attrs_processor
        self.kind = kind  # "parquet" | "otlp"
        self.target = target
        self._tracers: dict[str, trace.Tracer] = {}
        self._starters: dict[str, tuple[trace.Tracer, Any, Any]] = {}  # see starter()
        self._recorders: dict[str, Recorder | None] = {}  # see recorder()
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
    kind = os.environ.get("OTEL_ASSAY_EXPORTER", "").strip().lower()
    if kind in ("parquet", "otlp"):
        return kind
    if kind:
        log.warning("otel-assay: OTEL_ASSAY_EXPORTER=%r is not 'parquet' or 'otlp'; using parquet", kind)
        return "parquet"
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if endpoint and not os.environ.get("OTEL_ASSAY_DIR"):
        return "otlp"
    return "parquet"


def lake_dir() -> str:
    return os.environ.get("OTEL_ASSAY_DIR") or "./traces"


def _make_export(kind: str, lake: str | os.PathLike | None = None):
    if kind == "otlp":
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip().lower()
        try:
            if protocol == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise RuntimeError(
                "otel-assay: OTEL_ASSAY_EXPORTER=otlp needs the OTLP exporter: "
                "pip install opentelemetry-exporter-otlp") from e
        exporter = OTLPSpanExporter()
        queue = int(os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE", "0") or 0) or 262144
        processor = BatchSpanProcessor(exporter, max_queue_size=queue,
                                       max_export_batch_size=min(queue, 4096), schedule_delay_millis=1000)
        target = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                  or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "(default endpoint)")
        return exporter, processor, target
    from ..collect.exporter import ParquetSpanExporter
    directory = lake if lake is not None else lake_dir()
    # the default lake appears with the first span: importing otel_assay.auto in a module
    # that `otel-assay run --dir X` loads must not leave an empty ./traces behind
    exporter = ParquetSpanExporter(directory, create=lake is not None)
    return exporter, DirectExportProcessor(exporter), os.path.abspath(directory)


def _new_provider() -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    attrs: dict[str, Any] = {}
    version = os.environ.get("OTEL_ASSAY_VERSION")
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
        if kind == "otlp" and not owned and not os.environ.get("OTEL_ASSAY_EXPORTER", "").strip():
            # an OTLP endpoint in the environment configures the application's own exporter (or
            # opentelemetry-instrument's), which already sends every span of its provider there,
            # ours included with their assay.* attributes: a second OTLP exporter on the same
            # provider sent each span, the application's too, twice. Asked for by name
            # (OTEL_ASSAY_EXPORTER=otlp), it is still added
            kind = "parquet"
        exporter, export_processor, target = _make_export(kind, lake)
        if isinstance(export_processor, AssayAttributesProcessor):  # Parquet: one processor does both
            attrs_processor = export_processor
        else:
            attrs_processor = AssayAttributesProcessor()
            provider.add_span_processor(attrs_processor)
        provider.add_span_processor(export_processor)
        _PIPELINE = Pipeline(provider, owned, exporter, export_processor, attrs_processor, kind, target)
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
    if p is not None:  # every span asks: two Python calls fewer once the tracer exists
        t = p._tracers.get(name)
        if t is not None:
            return t
    p = pipeline()
    return p.tracer(name) if p is not None else _NOOP_TRACER


def starter(name: str = "otel_assay") -> tuple[trace.Tracer, Any, Any]:
    """``(tracer, processors, first)``: the tracer ``_spans.start_span`` starts spans with,
    and unless None the SDK's list of its span processors, whose first entry is checked to
    be ``first`` (our processor) before a span's attributes are handed to its ``on_start``
    (``PENDING``) instead of to ``start_span``.

    Given to ``start_span``, the SDK cleans each attribute value again (a lock and a dozen
    checks per value), a third of a whole span's cost; values ``_capturec.sdk_plain`` has
    put in the SDK's own form can go into the span's attribute dict directly. That gives the
    same span only where nothing sees the span between its start and that ``on_start``: the
    sampler is one of the SDK's own, which never read attributes, and our processor is the
    first the span is handed to, on this thread (checked at every span: processors added
    later come after it, but code may reorder them)."""
    p = _PIPELINE
    if p is not None:
        s = p._starters.get(name)
        if s is not None:
            return s
    p = pipeline()
    if p is None:
        return _NOOP_TRACER, None, None
    t = p.tracer(name)
    multi = _takes_pending(t)
    s = p._starters[name] = (t, multi, p.attrs_processor if multi is not None else None)
    return s


def _attribute_blind(sampler: Any, depth: int = 0) -> bool:
    """Whether ``sampler`` is one of the SDK's own, which pass attributes through unread (a
    ParentBased one only with such delegates)."""
    from opentelemetry.sdk.trace import sampling
    t = type(sampler)
    if t in (sampling.StaticSampler, sampling.TraceIdRatioBased, getattr(sampling, "_AlwaysOn", None),
             getattr(sampling, "_AlwaysOff", None)):
        return True
    if depth < 4 and t in (sampling.ParentBased, sampling.ParentBasedTraceIdRatio,
                           getattr(sampling, "_ParentBasedAlwaysOn", None), getattr(sampling, "_ParentBasedAlwaysOff", None)):
        delegates = ("_root", "_remote_parent_sampled", "_remote_parent_not_sampled", "_local_parent_sampled",
                     "_local_parent_not_sampled")
        return all(hasattr(sampler, d) and _attribute_blind(getattr(sampler, d), depth + 1) for d in delegates)
    return False


def _takes_pending(tracer: Any) -> Any:
    """The SDK's span processor list of ``tracer`` when its spans may take their attributes
    from ``PENDING`` (an SDK tracer, a sampler of the SDK's, processors called in order on
    the starting thread), else None."""
    if type(tracer) is not sdk_trace.Tracer or not _attribute_blind(getattr(tracer, "sampler", None)):
        return None
    multi = getattr(tracer, "span_processor", None)
    if (type(multi) is not sdk_trace.SynchronousMultiSpanProcessor
            or type(getattr(multi, "_span_processors", None)) is not tuple):
        return None
    return multi


_UNSET = trace.Status(trace.StatusCode.UNSET)
_SAMPLED_FLAGS = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_RANDOM = getattr(trace.TraceFlags, "RANDOM_TRACE_ID", 0)
_SAMPLED_RANDOM_FLAGS = trace.TraceFlags(trace.TraceFlags.SAMPLED | _RANDOM)


class Recorder:
    """Makes our spans where only our processor sees them, without the SDK's ``start_span``,
    whose code in an agent's run costs three times what it costs in a tight loop (out of
    the CPU's caches by then), and was half of capture's cost per step:

    * ``record``: a span that starts and ends at once (``_spans.record_span``: a model call
      recorded when it returns), built as the ``ReadableSpan`` the SDK would hand our
      processor, with no SDK span to construct, start and end;
    * ``start``: a span that runs (a tool call, the tool's own spans nesting under it), the
      SDK's own span class with the fields ``start_span`` gives it (learnt from spans the
      SDK starts, ``_span_fields``) and our processor's ``on_start`` done; it ends as any
      SDK span does.

    Only where that span goes nowhere else and nothing could tell the difference:

    * our ``DirectExportProcessor`` is the provider's only processor (checked at every span:
      code may add one later), so no other processor misses the span's start (or end);
    * the tracer is the SDK's, with one of its own samplers (which read no attributes and
      answer a question the same way twice, see ``_attribute_blind``), no attribute length
      limit (``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``), the SDK's own span metrics off, and the
      tracer enabled (the sampler and the limits read at every span, as the SDK reads them);
    * the SDK's ``Tracer.start_span`` and its span's ``__init__``, ``start`` and ``end`` are
      its own code, not wrapped on the class (checked at every span) or on our tracer, so
      nothing that wraps them misses a span;
    * the span has a valid parent (a root span's trace id is left to the SDK) with
      ``TraceFlags``, the sampler records and samples it and adds no attributes, it has no
      links, and its attributes, with the trial's, fit the span's attribute limit without
      sharing a key (``_add_attributes``' rules);
    * for ``start``, the SDK's spans have no field ``_span_fields`` does not know;
    * no processor was added while the span was being built (another thread's).

    ``record`` returns False and ``start`` None everywhere else, having changed nothing (but
    for a span id drawn when another thread added a processor meanwhile): the caller then
    leaves the span to the SDK. Tests compare the two on every field, over samplers,
    limits, parents, trial and baggage attributes, and with spans the SDK starts plainly."""

    __slots__ = ("tracer", "multi", "processor", "limits", "sampler", "enabled", "info", "scope", "no_events",
                 "no_links", "follows_parent", "span_fields")

    def __init__(self, tracer: Any, multi: Any, processor: DirectExportProcessor, limits: Any) -> None:
        self.tracer, self.multi, self.processor, self.limits = tracer, multi, processor, limits
        self.sampler = tracer.sampler  # judged here (see _attribute_blind): another one means the SDK's path
        self.enabled = getattr(tracer, "_is_enabled", None)
        self.info = getattr(tracer, "instrumentation_info", None)
        self.scope = getattr(tracer, "_instrumentation_scope", None)
        # a span's events and links as the SDK gives them (empty BoundedLists): nothing can
        # add to an ended span's, so every recorded span shares these two
        self.no_events, self.no_links = BoundedList(0), BoundedList(0)
        self.follows_parent = _follows_parent(tracer.sampler)
        self.span_fields: Any = _UNLEARNT  # learnt at the first span start() may make

    @classmethod
    def of(cls, tracer: Any, pipeline: Pipeline) -> Recorder | None:
        proc = pipeline.export_processor
        multi = _takes_pending(tracer)
        if multi is None or type(proc) is not DirectExportProcessor or pipeline.attrs_processor is not proc:
            return None
        limits = getattr(tracer, "_span_limits", None)
        metrics = getattr(tracer, "_tracer_metrics", None)
        if (limits is None or not hasattr(limits, "max_span_attribute_length")
                or (metrics is not None and type(metrics).__name__ != "NoOpTracerMetrics")
                or not hasattr(tracer, "_instrumentation_scope") or not hasattr(tracer, "id_generator")
                or _SDK_CODE is None or any(n in vars(tracer) for n in ("start_span", "start_as_current_span"))):
            return None
        return cls(tracer, multi, proc, limits)

    def _admit(self, name: str, ready: dict[str, Any], kind: trace.SpanKind, ctx: otel_context.Context | None,
               parent_span: Span | None) -> tuple[Any, Any, Any, dict[str, Any] | None] | None:
        """``(procs, parent, context, trial attributes or None)`` of the span, or None where
        the SDK must make it. ``ready`` is left as it is (the caller adds the attributes).
        The parent is ``parent_span`` (an SDK span) if given, else ``ctx``'s span; a parent
        span is put in a context (``trace.set_span_in_context``: two calls and a copy of the
        current context) only for a sampler that is asked, as the SDK would ask it."""
        procs, proc, tracer, limits = self.multi._span_processors, self.processor, self.tracer, self.limits
        # the limits and the sampler as they are now, as the SDK reads them at every span
        if (len(procs) != 1 or procs[0] is not proc or (self.enabled is not None and not self.enabled())
                or tracer.sampler is not self.sampler or limits.max_span_attribute_length is not None
                # _sdk_code() written out
                or (sdk_trace.Tracer.start_span, _SpanClass.__init__, _SpanClass.start, _SpanClass.end) != _SDK_CODE):
            return None
        if parent_span is not None:
            parent = parent_span.get_span_context()  # a method: code may wrap it, as the SDK reads it
        else:
            parent = trace.get_current_span(ctx).get_span_context()
        # flags of another type than TraceFlags: the SDK's samplers fail on them, as they should
        if (not isinstance(parent, trace.SpanContext) or not parent.is_valid
                or not isinstance(parent[3], trace.TraceFlags)):
            return None
        trace_id = parent[0]
        if self.follows_parent:  # the SDK's default sampler, answered without its three calls
            if not parent[3] & _SAMPLED:
                return None
            trace_state = parent[4]
        else:
            if parent_span is not None:
                ctx = trace.set_span_in_context(parent_span)
            result = tracer.sampler.should_sample(ctx, trace_id, name, kind, None, ())
            if result.decision is not _RECORD_AND_SAMPLE or result.attributes:
                return None
            trace_state = result.trace_state
        maxlen = limits.max_span_attributes
        extra = _ACTIVE_TRACES.get(trace_id)  # _trial_attributes, its call saved for a trial's span
        if extra is None:
            # the baggage of ctx, or with a parent span of the current context (where the SDK
            # would have put the span: the same baggage)
            extra = _trial_attributes(trace_id, ctx)
        elif not extra[0]:
            extra = None
        if extra is not None:
            attrs, longest = extra
            if (longest < 0 or not ready.keys().isdisjoint(attrs)
                    or (maxlen is not None and len(ready) + len(attrs) > maxlen)):
                return None
            extra = attrs
        elif maxlen is not None and len(ready) > maxlen:
            return None
        flags = _SAMPLED_RANDOM_FLAGS if _RANDOM and parent[3] & _RANDOM else _SAMPLED_FLAGS
        context = trace.SpanContext(trace_id, tracer.id_generator.generate_span_id(), False, flags, trace_state)
        return procs, parent, context, extra

    def record(self, name: str, ready: dict[str, Any], kind: trace.SpanKind, ctx: otel_context.Context | None,
               parent_span: Span | None, start_time: int) -> bool:
        """Record the span (``ready``: its attributes in the SDK's stored form, a dict this
        takes; the parent: see _admit), or return False where the SDK must."""
        admitted = self._admit(name, ready, kind, ctx, parent_span)
        if admitted is None:
            return False
        procs, parent, context, extra = admitted
        tracer = self.tracer
        bounded = BoundedAttributes(self.limits.max_span_attributes, None, True, None)
        bounded._dict = ready
        span = ReadableSpan(
            name=name, context=context, parent=parent, resource=tracer.resource, attributes=bounded,
            events=self.no_events, links=self.no_links, kind=kind, instrumentation_info=self.info, status=_UNSET,
            start_time=start_time, end_time=time_ns(), instrumentation_scope=self.scope)
        # a processor another thread added meanwhile would have seen the SDK's span end: the
        # SDK's span then (the SDK reads the list at the start and at the end)
        if self.multi._span_processors is not procs:
            return False
        if extra is not None:
            ready.update(extra)
        self.processor.on_end(span)
        return True

    def start(self, name: str, ready: dict[str, Any], kind: trace.SpanKind, ctx: otel_context.Context | None,
              parent_span: Span | None, start_time: int) -> Span | None:
        """The SDK's span, started, as ``tracer.start_span`` returns it after our processor's
        ``on_start`` (``ready``: its attributes in the SDK's stored form, a dict this takes;
        the parent: see _admit); None where the SDK must start it."""
        fields = self.span_fields
        if fields is _UNLEARNT:
            if self.enabled is not None and not self.enabled():
                return None  # a disabled tracer starts no span to learn from: at a later span
            fields = self.span_fields = _span_fields(self.tracer, self.multi)
        if fields is None:
            return None
        admitted = self._admit(name, ready, kind, ctx, parent_span)
        if admitted is None:
            return None
        procs, parent, context, extra = admitted
        limits = self.limits
        bounded = BoundedAttributes(limits.max_span_attributes, None, False, None)
        bounded._dict = ready
        span = _new_span(_SpanClass)
        d = span.__dict__
        d.update(fields)  # the SDK's order; those below overwrite placeholders
        d["_name"], d["_context"], d["_kind"], d["_parent"], d["_start_time"] = name, context, kind, parent, start_time
        d["_resource"], d["_sampler"], d["_limits"] = self.tracer.resource, self.sampler, limits
        d["_lock"], d["_attributes"] = threading.Lock(), bounded
        d["_events"], d["_links"] = BoundedList(limits.max_events), BoundedList(limits.max_links)
        if self.multi._span_processors is not procs:  # see record
            return None
        if extra is not None:
            ready.update(extra)
        return span


# the fields of an SDK span that ``Recorder.start`` sets for each span; the others are the
# same for every span of a tracer (``_span_fields``)
_PER_SPAN = frozenset(("_name", "_context", "_kind", "_parent", "_start_time", "_resource", "_sampler", "_limits",
                       "_lock", "_attributes", "_events", "_links"))
_SHARED = frozenset(("_end_time", "_instrumentation_info", "_instrumentation_scope", "_status", "_trace_config",
                     "_record_exception", "_set_status_on_exception", "_span_processor", "_record_end_metrics"))
_SpanClass = getattr(sdk_trace, "_Span", Span)
_new_span = object.__new__  # Span.__new__ only refuses the Span class itself
_UNLEARNT = object()


def _sdk_code() -> tuple[Any, ...]:
    """What the Recorder does instead of: the SDK's functions that start and end a span."""
    return sdk_trace.Tracer.start_span, _SpanClass.__init__, _SpanClass.start, _SpanClass.end


def _is_sdk_code(functions: tuple[Any, ...]) -> bool:
    """Whether each is a plain function of the SDK's trace module (a wrapper set on the
    class before we were imported is another function object, from another file)."""
    import types
    return all(type(f) is types.FunctionType and f.__code__.co_filename == sdk_trace.__file__ for f in functions)


_SDK_CODE = _sdk_code() if _is_sdk_code(_sdk_code()) else None


class _ProbeIds:
    def generate_span_id(self) -> int:
        return 1

    def generate_trace_id(self) -> int:
        return 1

    def is_trace_id_random(self) -> bool:
        return False


def _span_fields(tracer: Any, multi: Any) -> dict[str, Any] | None:
    """A span's fields as ``tracer`` sets them, in the SDK's order: those every span has with
    the same value (``_SHARED``), and those ``Recorder.start`` overwrites (``_PER_SPAN``),
    taken from two root spans the SDK starts on a copy of the tracer that hands them to no
    processor. None where those spans have a field this does not know (another SDK
    version), or a field of ``_SHARED`` that is not the same object in both: ``start`` then
    leaves every span to the SDK."""
    import copy
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON
    try:
        probe = copy.copy(tracer)
        # ids of its own: the SDK's default generator draws on the random module, whose
        # sequence an application may have seeded
        probe.span_processor, probe.sampler, probe.id_generator = (
            sdk_trace.SynchronousMultiSpanProcessor(), ALWAYS_ON, _ProbeIds())
        spans = [sdk_trace.Tracer.start_span(probe, "probe", context=otel_context.Context()) for _ in range(2)]
    except Exception:  # noqa: BLE001 - a tracer this cannot copy: the SDK's spans
        return None
    for span in spans:
        if (type(span) is not _SpanClass or vars(span).keys() != _PER_SPAN | (vars(span).keys() & _SHARED)
                or span._end_time is not None or type(span._attributes) is not BoundedAttributes
                or type(span._events) is not BoundedList or type(span._links) is not BoundedList
                or type(span._lock) is not type(threading.Lock())):
            return None
    first, second = (vars(s) for s in spans)
    if any(first[k] is not second[k] for k in first.keys() & _SHARED):
        return None
    template = dict(first)
    template["_span_processor"] = multi
    return template


def _follows_parent(sampler: Any) -> bool:
    """Whether ``sampler`` is a ParentBased one (the SDK's default) whose answer for a span
    with a valid parent is the parent's: record and sample it, with the parent's trace state,
    if the parent is sampled; drop it if not (a StaticSampler with that decision as each of
    its four parent delegates)."""
    from opentelemetry.sdk.trace import sampling
    if type(sampler) not in (sampling.ParentBased, getattr(sampling, "_ParentBasedAlwaysOn", None)):
        return False

    def static(name: str, decision: Any) -> bool:
        d = getattr(sampler, name, None)
        return type(d) is sampling.StaticSampler and getattr(d, "_decision", None) is decision
    return (static("_remote_parent_sampled", _RECORD_AND_SAMPLE) and static("_local_parent_sampled", _RECORD_AND_SAMPLE)
            and static("_remote_parent_not_sampled", Decision.DROP)
            and static("_local_parent_not_sampled", Decision.DROP))


def recorder(name: str = "otel_assay") -> Recorder | None:
    """The ``Recorder`` of the tracer ``name``, or None where spans that start and end at once
    must be SDK spans (see Recorder)."""
    p = _PIPELINE
    if p is not None:
        r = p._recorders.get(name, False)
        if r is not False:
            return r
    p = pipeline()
    if p is None:
        return None
    r = p._recorders[name] = Recorder.of(p.tracer(name), p)
    return r


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
    ok = p.export_processor.force_flush(int(timeout_s * 1000))
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
        from ..collect.exporter import ParquetSpanExporter
        new = ParquetSpanExporter(directory)
        old = p.exporter
        p.export_processor.exporter = new
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
    import multiprocessing.pool
    import multiprocessing.util
    # above the pool's and queues' finalizers (15, 10): write while the worker is intact
    multiprocessing.util.Finalize(None, _at_exit, exitpriority=20)
    # Pool.terminate() (what ``with Pool() as p:`` does on exit) SIGTERMs its workers, so
    # no exit hook runs there: a pool worker writes each trial when it ends
    _FLUSH_EACH_TRIAL = (getattr(multiprocessing.current_process(), "_target", None)
                         is multiprocessing.pool.worker)


def _after_fork_in_child() -> None:
    global _LOCK, _RUN_ID
    # the child is another process: its own run id (unless the user set one for all), so its
    # auto-indexed trials (counters restart, see trial.py) do not collide with the parent's
    # or its siblings' under the same (run_id, scenario, version, index)
    if not _RUN_ID_FROM_ENV:
        _RUN_ID = uuid.uuid4().hex
    _LOCK = threading.RLock()  # another thread may have held it at the fork
    # another thread's span, mid-start at the fork: a thread of the child may get its id
    PENDING.clear()
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


def _reset_for_tests() -> None:  # pragma: no cover - only used by in-process unit tests
    global _PIPELINE
    _PIPELINE = None
