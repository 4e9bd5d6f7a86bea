"""What the Recorder tests share: a pipeline of ours on its own SDK provider, parents of
every kind, samplers, limits and attribute sets, and the comparison of two exported spans."""

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
import threading
from typing import Any

from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from otel_assay import semconv
from otel_assay.capture import _runtime, _spans

TRIAL = {semconv.ASSAY_SCENARIO: "refund", semconv.ASSAY_RUN_ID: "r" * 32, semconv.ASSAY_AGENT_VERSION: "v2",
         semconv.ASSAY_TRIAL_INDEX: 3}
CHAT = {semconv.GEN_AI_OPERATION_NAME: "chat", semconv.GEN_AI_REQUEST_MODEL: "m-1", semconv.ASSAY_STEP_KIND: "llm",
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 120, "gen_ai.response.finish_reasons": ["stop"], "none": None,
        "x": 1.5, "ok": True, semconv.GEN_AI_INPUT_MESSAGES: '[{"role": "user", "parts": []}]'}


class Str(str):
    pass


ATTRS = {
    "chat": CHAT,
    "not finite": {"a": float("nan"), "b": 1},
    "an empty key": {"": "x", "a": 1},
    "a str subclass": {"a": Str("sub")},
    "an object": {"a": object(), "b": 1},
    "a trial key": {semconv.ASSAY_SCENARIO: "mine", "a": 1},
    "long text": {"a": "x" * 50},
    "many": {f"k{i}": i for i in range(6)},
}
LIMITS = {"default": SpanLimits(), "length limit": SpanLimits(max_attribute_length=20),
          "few attributes": SpanLimits(max_span_attributes=8)}
SAMPLERS = {"always on": sampling.ALWAYS_ON, "always off": sampling.ALWAYS_OFF, "default": sampling.DEFAULT_ON,
            "parent based off": sampling.ParentBased(sampling.ALWAYS_OFF),
            "ratio": sampling.TraceIdRatioBased(0.5), "parent based ratio": sampling.ParentBasedTraceIdRatio(0.5),
            # ParentBased with delegates of its own: the Recorder asks the sampler, as the SDK does
            "parent based, a sampled parent's child dropped": sampling.ParentBased(
                sampling.ALWAYS_ON, local_parent_sampled=sampling.ALWAYS_OFF, remote_parent_sampled=sampling.ALWAYS_OFF),
            "parent based, an unsampled parent's child kept": sampling.ParentBased(
                sampling.ALWAYS_ON, local_parent_not_sampled=sampling.ALWAYS_ON,
                remote_parent_not_sampled=sampling.ALWAYS_ON)}
REMOTE_ID = 0x0AF7651916CD43DD8448EB211C80319C


def parent_of(kind: str, tracer):
    """(parent for record_span: a context or a span, trial trace id or None, span to end after)."""
    if kind in ("local", "local span"):  # given as a context, or as the span itself
        root = tracer.start_span("root")
        return (trace.set_span_in_context(root) if kind == "local" else root), root.get_span_context().trace_id, root
    if kind == "local span, with trace state":  # a local span under a remote parent: its trace state
        remote = SpanContext(REMOTE_ID, 0xB7AD6B7169203331, True, TraceFlags(TraceFlags.SAMPLED),
                             TraceState([("vendor", "v1")]))
        root = tracer.start_span("root", context=trace.set_span_in_context(NonRecordingSpan(remote)))
        return root, root.get_span_context().trace_id, root
    if kind == "remote sampled, with trace state":
        sc = SpanContext(REMOTE_ID, 0xB7AD6B7169203331, True, TraceFlags(TraceFlags.SAMPLED),
                         TraceState([("vendor", "v1")]))
    elif kind == "remote not sampled":
        sc = SpanContext(REMOTE_ID, 0xB7AD6B7169203331, True, TraceFlags(0))
    elif kind == "remote, random trace id":
        sc = SpanContext(REMOTE_ID, 0xB7AD6B7169203331, True,
                         TraceFlags(TraceFlags.SAMPLED | getattr(TraceFlags, "RANDOM_TRACE_ID", 0)))
    elif kind == "baggage":
        sc = SpanContext(REMOTE_ID, 0xB7AD6B7169203331, True, TraceFlags(TraceFlags.SAMPLED))
        ctx = trace.set_span_in_context(NonRecordingSpan(sc))
        ctx = baggage.set_baggage(semconv.ASSAY_SCENARIO, "from-baggage", ctx)
        return baggage.set_baggage(semconv.ASSAY_TRIAL_INDEX, "7", ctx), None, None
    else:  # "none": a root span
        return otel_context.Context(), None, None
    return trace.set_span_in_context(NonRecordingSpan(sc)), None, None


class Pipe:
    """Our pipeline (DirectExportProcessor alone on its own provider, as on a provider
    otel-assay creates) exporting to memory; the global pipeline is swapped for it."""

    def __init__(self, monkeypatch, provider, exporter=None):
        self.exported = exporter or InMemorySpanExporter()
        self.proc = _runtime.DirectExportProcessor(self.exported)
        provider.add_span_processor(self.proc)
        self.pipe = _runtime.Pipeline(provider, True, self.exported, self.proc, self.proc, "memory", None)
        monkeypatch.setattr(_runtime, "_PIPELINE", self.pipe)
        # spans left to the SDK: each goes through _runtime.starter (a wrapper on the tracer
        # would turn the Recorder off, as any wrapper of the SDK's start_span does)
        self.sdk_calls = 0
        real = _runtime.starter

        def counted(name="otel_assay"):
            self.sdk_calls += 1
            return real(name)
        monkeypatch.setattr(_runtime, "starter", counted)

    def twice(self, monkeypatch, name, attrs, ctx, **kw):
        """record_span as it runs, then with the Recorder turned off (the SDK's span): the two
        spans exported (None where nothing was) and whether the first took the Recorder."""
        before, n = self.sdk_calls, len(self.exported.get_finished_spans())
        _spans.record_span(name, attrs, parent=ctx, **kw)
        fast = self.sdk_calls == before
        spans = self.exported.get_finished_spans()
        first = spans[n] if len(spans) > n else None
        with monkeypatch.context() as m:
            m.setattr(_runtime, "recorder", lambda name="otel_assay": None)
            _spans.record_span(name, attrs, parent=ctx, **kw)
        spans = self.exported.get_finished_spans()
        second = spans[n + (first is not None)] if len(spans) > n + (first is not None) else None
        return first, second, fast


def same(a, b, root=False):
    """Every field a processor or exporter reads, but the span id and end time (and the
    trace id of a root span, a new one each)."""
    assert a.name == b.name and a.kind == b.kind and a.status.status_code == b.status.status_code
    assert a.status.description == b.status.description
    assert (a.context.trace_id == b.context.trace_id) != root and a.context.is_remote == b.context.is_remote
    assert a.context.trace_flags == b.context.trace_flags and a.context.trace_state == b.context.trace_state
    assert a.context.span_id != b.context.span_id and a.context.is_valid
    assert a.parent == b.parent
    assert list(a.attributes.items()) == list(b.attributes.items())
    assert [type(v) for v in a.attributes.values()] == [type(v) for v in b.attributes.values()]
    assert a.dropped_attributes == b.dropped_attributes
    assert events(a) == events(b)
    assert [e.dropped_attributes for e in a.events] == [e.dropped_attributes for e in b.events]
    assert [(x.context, dict(x.attributes or {}), x.dropped_attributes) for x in a.links] == [
        (y.context, dict(y.attributes or {}), y.dropped_attributes) for y in b.links]
    assert (a.dropped_events, a.dropped_links) == (b.dropped_events, b.dropped_links)
    assert a.resource is b.resource and a.instrumentation_scope == b.instrumentation_scope
    assert a.start_time == b.start_time and a.start_time <= a.end_time and a.end_time <= b.end_time
    assert a._attributes._immutable and b._attributes._immutable


def events(span, times=True):
    return [(e.name, e.timestamp if times else None, dict(e.attributes or {})) for e in span.events]


def kept(attrs):
    return sum(v is not None for v in attrs.values())


PARENTS = ["local", "local span", "local span, with trace state", "remote sampled, with trace state", "remote not sampled", "remote, random trace id", "baggage",
           "none"]


class Seen(SpanProcessor):
    """The names of the spans a processor sees start and end."""

    def __init__(self):
        self.started, self.ended = [], []

    def on_start(self, span, parent_context=None):
        self.started.append(span.name)

    def on_end(self, span):
        self.ended.append(span.name)


def provider_adding(seen: SpanProcessor) -> tuple[TracerProvider, Any]:
    """A provider whose id generator, once armed (the second value, called), has another
    thread add ``seen`` to the provider while the next span id is made: deterministically
    in the middle of building a span."""
    armed = []

    class SwitchPoint(RandomIdGenerator):
        def generate_span_id(self):
            if armed:
                armed.clear()
                t = threading.Thread(target=lambda: provider.add_span_processor(seen))
                t.start()
                t.join()
            return super().generate_span_id()
    provider = TracerProvider(id_generator=SwitchPoint())
    return provider, lambda: armed.append(True)


def pipe_and_root(monkeypatch, provider):
    """Our pipeline on ``provider``, and a root span of the application's to start spans under."""
    return Pipe(monkeypatch, provider), provider.get_tracer("app").start_span("root")
