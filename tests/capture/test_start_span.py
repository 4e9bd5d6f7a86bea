"""_spans.start_span: a span started through the SDK's public tracer API, with its
attributes cleaned, under the parent given (a span, a context, or the current context), and
seen with those attributes by every processor of the provider, ours or the application's.
Real SDK providers, processors and in-memory exporters; each test sets its pipeline up on
its own provider."""

import math
import threading

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_assay import semconv
from otel_assay.capture import _runtime, _spans

TRIAL = {semconv.ASSAY_SCENARIO: "refund", semconv.ASSAY_RUN_ID: "r" * 32, semconv.ASSAY_AGENT_VERSION: "v2",
         semconv.ASSAY_TRIAL_INDEX: 3}


class Seen(SpanProcessor):
    """What a processor sees of each span when it starts."""

    def __init__(self):
        self.at_start = []

    def on_start(self, span, parent_context=None):
        self.at_start.append((span.name, dict(span.attributes)))


def _pipeline(monkeypatch, provider, *, before=()):
    """Our pipeline on ``provider`` (the global one stays untouched): the assay processor
    after the application's ``before``; an in-memory exporter after it."""
    for p in before:
        provider.add_span_processor(p)
    ours = _runtime.AssayAttributesProcessor()
    provider.add_span_processor(ours)
    exported = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exported)
    provider.add_span_processor(processor)
    pipe = _runtime.Pipeline(provider, True, exported, processor, ours, "memory", None)
    monkeypatch.setattr(_runtime, "_PIPELINE", pipe)
    return pipe, exported


ATTRS = {
    "plain": {"gen_ai.operation.name": "chat", "n": 1, "ok": True, "x": 1.5, "none": None,
              "reasons": ["stop"], "pair": ("a", "b"), "empty": [], "json": '{"a": [1]}'},
    "not finite": {"a": float("nan"), "b": float("-inf")},
    "an object": {"a": object(), "b": 1},
    "mixed list": {"a": ["x", 1]},
    "long text": {"a": "x" * 50, "b": "y"},
}
LIMITS = {
    "default": SpanLimits(),
    "length limit": SpanLimits(max_attribute_length=20),
    "few attributes": SpanLimits(max_span_attributes=4),
}


@pytest.mark.parametrize("limits", sorted(LIMITS))
@pytest.mark.parametrize("attrs", sorted(ATTRS))
@pytest.mark.parametrize("in_trial", [False, True])
def test_same_span_as_the_sdk_gives_the_cleaned_attributes(attrs, limits, in_trial, monkeypatch):
    """start_span's span is the SDK's span for clean(attrs), the trial's attributes after
    them, under the provider's limits."""
    provider = TracerProvider(span_limits=LIMITS[limits])
    _, exported = _pipeline(monkeypatch, provider)
    twin_exported = InMemorySpanExporter()
    twin_provider = TracerProvider(span_limits=LIMITS[limits])
    twin_provider.add_span_processor(SimpleSpanProcessor(twin_exported))
    root = provider.get_tracer("t").start_span("root")
    twin_root = twin_provider.get_tracer("t").start_span("root")
    if in_trial:
        _runtime.register_trace(root.get_span_context().trace_id, TRIAL)
    try:
        _spans.start_span("s", ATTRS[attrs], parent=root, kind=trace.SpanKind.CLIENT, start_time=5).end(end_time=9)
    finally:
        _runtime.unregister_trace(root.get_span_context().trace_id)
    twin = twin_provider.get_tracer("t").start_span(
        "s", context=trace.set_span_in_context(twin_root), kind=trace.SpanKind.CLIENT,
        attributes=_spans.clean(ATTRS[attrs]), start_time=5)
    if in_trial:
        twin.set_attributes(TRIAL)
    twin.end(end_time=9)
    [span], [want] = exported.get_finished_spans(), twin_exported.get_finished_spans()
    assert list(span.attributes.items()) == list(want.attributes.items())
    assert span.dropped_attributes == want.dropped_attributes
    assert (span.name, span.kind, span.start_time, span.end_time) == ("s", trace.SpanKind.CLIENT, 5, 9)
    assert span.parent.span_id == root.get_span_context().span_id
    assert (set(TRIAL) <= set(span.attributes)) is in_trial  # set last: the oldest give way


def test_the_parent_is_a_span_a_context_or_the_current_context(monkeypatch):
    provider = TracerProvider()
    _, exported = _pipeline(monkeypatch, provider)
    root = provider.get_tracer("t").start_span("root")
    by_span = _spans.start_span("a", {}, parent=root)
    by_context = _spans.start_span("b", {}, parent=trace.set_span_in_context(root))
    with trace.use_span(root):
        by_current = _spans.start_span("c", {})
    orphan = _spans.start_span("d", {}, parent=otel_context.Context())
    for span in (by_span, by_context, by_current):
        assert span.parent.span_id == root.get_span_context().span_id
        assert span.get_span_context().trace_id == root.get_span_context().trace_id
    assert orphan.parent is None


def test_a_processor_before_ours_sees_the_attributes(monkeypatch):
    """The application's processor, added before ours, sees the span's own attributes at
    its start (the trial's are added by ours after it)."""
    first = Seen()
    provider = TracerProvider()
    _pipeline(monkeypatch, provider, before=(first,))
    root = provider.get_tracer("t").start_span("root")
    _runtime.register_trace(root.get_span_context().trace_id, TRIAL)
    try:
        span = _spans.start_span("t", {"a": 2, "n": None}, parent=root)
    finally:
        _runtime.unregister_trace(root.get_span_context().trace_id)
    assert first.at_start[-1] == ("t", {"a": 2})
    assert dict(span.attributes) == {"a": 2, **TRIAL}


def test_threads_keep_their_own_attributes(monkeypatch):
    provider = TracerProvider()
    _, exported = _pipeline(monkeypatch, provider)
    errors = []

    def work(t):
        try:
            for i in range(300):
                span = _spans.start_span(f"{t}-{i}", {"t": t, "i": i, "f": math.pi})
                span.end()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    spans = exported.get_finished_spans()
    assert len(spans) == 6 * 300
    for s in spans:
        t, i = map(int, s.name.split("-"))
        assert dict(s.attributes) == {"t": t, "i": i, "f": math.pi}
