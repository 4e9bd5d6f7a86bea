"""_spans.start_span hands a span's attributes to our processor's on_start (``_runtime.PENDING``)
instead of to the SDK's start_span, which would clean every value again, where that gives the
same span: the sampler is one of the SDK's own and our processor is the first the span reaches.
Everywhere else the attributes go through start_span. Real SDK providers, processors and
in-memory exporters; each test sets its pipeline up on its own provider."""

import math
import threading

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_assay import semconv
from otel_assay.capture import _runtime, _spans

pytestmark = pytest.mark.skipif(_spans._sdk_plain is None, reason="capture's compiled helpers are not built")

TRIAL = {semconv.ASSAY_SCENARIO: "refund", semconv.ASSAY_RUN_ID: "r" * 32, semconv.ASSAY_AGENT_VERSION: "v2",
         semconv.ASSAY_TRIAL_INDEX: 3}


class _Str(str):
    pass


class Seen(SpanProcessor):
    """What a processor sees of each span when it starts."""

    def __init__(self):
        self.at_start = []

    def on_start(self, span, parent_context=None):
        self.at_start.append((span.name, dict(span.attributes)))


def _pipeline(monkeypatch, provider, *, before=()):
    """Our pipeline on ``provider`` (the global one stays untouched): the assay processor
    after the application's ``before`` (first, as on a provider we create, without them);
    an in-memory exporter after it."""
    for p in before:
        provider.add_span_processor(p)
    ours = _runtime.AssayAttributesProcessor()
    provider.add_span_processor(ours)
    exported = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    pipe = _runtime.Pipeline(provider, True, exported, None, ours, "memory", None)
    monkeypatch.setattr(_runtime, "_PIPELINE", pipe)
    return pipe, exported


ATTRS = {
    "plain": {"gen_ai.operation.name": "chat", "n": 1, "ok": True, "x": 1.5, "none": None,
              "reasons": ["stop"], "pair": ("a", "b"), "empty": [], "json": '{"a": [1]}'},
    "not finite": {"a": float("nan"), "b": float("-inf")},
    "an empty key": {"": "x", "a": 1},
    "a str subclass": {"a": _Str("sub")},
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
def test_same_span_as_through_start_span(attrs, limits, in_trial, monkeypatch):
    """Attributes (values, types, order), dropped count and what a later processor sees at
    the start: as when the SDK's start_span is given _spans.clean(attrs)."""
    twin_seen, seen = Seen(), Seen()
    twin_provider = TracerProvider(span_limits=LIMITS[limits])
    twin_provider.add_span_processor(_runtime.AssayAttributesProcessor())
    twin_provider.add_span_processor(twin_seen)
    provider = TracerProvider(span_limits=LIMITS[limits])
    pipe, exported = _pipeline(monkeypatch, provider)
    provider.add_span_processor(seen)
    assert _runtime.starter()[2] is pipe.attrs_processor

    twin_root = twin_provider.get_tracer("t").start_span("root")
    root = provider.get_tracer("t").start_span("root")
    if in_trial:
        _runtime.register_trace(twin_root.get_span_context().trace_id, TRIAL)
        _runtime.register_trace(root.get_span_context().trace_id, TRIAL)
    try:
        twin = twin_provider.get_tracer("t").start_span(
            "s", context=trace.set_span_in_context(twin_root), attributes=_spans.clean(ATTRS[attrs]))
        ours = _spans.start_span("s", ATTRS[attrs], parent=root)
    finally:
        _runtime.unregister_trace(twin_root.get_span_context().trace_id)
        _runtime.unregister_trace(root.get_span_context().trace_id)
    assert list(ours.attributes.items()) == list(twin.attributes.items())
    assert [type(v) for v in ours.attributes.values()] == [type(v) for v in twin.attributes.values()]
    assert ours.dropped_attributes == twin.dropped_attributes
    assert seen.at_start[-1] == twin_seen.at_start[-1]
    ours.end()
    assert dict(exported.get_finished_spans()[-1].attributes) == dict(twin.attributes)
    assert not _runtime.PENDING


def test_plain_values_skip_the_sdk_cleaning(monkeypatch):
    """The saving is taken where it applies (else it silently goes): the SDK's cleaning is
    not called for the plain values every adapter span has."""
    import opentelemetry.attributes as otel_attributes

    provider = TracerProvider()
    _pipeline(monkeypatch, provider)
    calls = []
    name = next(n for n in ("_clean_attribute", "_clean_attribute_value") if hasattr(otel_attributes, n))
    real = getattr(otel_attributes, name)
    monkeypatch.setattr(otel_attributes, name, lambda *a: calls.append(a) or real(*a))
    span = _spans.start_span("s", ATTRS["plain"])
    assert calls == []
    assert span.attributes["reasons"] == ("stop",) and span.attributes["x"] == 1.5
    _spans.start_span("s", ATTRS["an object"])  # the SDK's path: its cleaning runs
    assert calls


def test_a_processor_before_ours_sees_the_attributes(monkeypatch):
    """On an application's provider whose own processor comes first, attributes go through
    start_span: that processor sees them when the span starts."""
    first = Seen()
    provider = TracerProvider()
    _pipeline(monkeypatch, provider, before=[first])
    _spans.start_span("s", {"a": "x", "b": 2})
    assert first.at_start == [("s", {"a": "x", "b": 2})]


class ByAttribute(sampling.Sampler):
    """A sampler that reads attributes: it must be given them."""

    def __init__(self):
        self.given = []

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None,
                      trace_state=None):
        self.given.append(dict(attributes or {}))
        keep = (attributes or {}).get("keep", False)
        return sampling.SamplingResult(sampling.Decision.RECORD_AND_SAMPLE if keep else sampling.Decision.DROP,
                                       attributes)

    def get_description(self):
        return "ByAttribute"


@pytest.mark.parametrize("wrap", [False, True])
def test_a_sampler_that_reads_attributes_is_given_them(wrap, monkeypatch):
    sampler = ByAttribute()
    provider = TracerProvider(sampler=sampling.ParentBased(sampler) if wrap else sampler)
    _pipeline(monkeypatch, provider)
    assert _runtime.starter()[2] is None
    assert _spans.start_span("s", {"keep": True, "a": 1}).is_recording()
    assert not _spans.start_span("s", {"keep": False, "a": 1}).is_recording()
    assert sampler.given == [{"keep": True, "a": 1}, {"keep": False, "a": 1}]


@pytest.mark.parametrize("sampler", [sampling.ALWAYS_ON, sampling.ALWAYS_OFF, sampling.DEFAULT_ON,
                                     sampling.TraceIdRatioBased(0.5), sampling.ParentBasedTraceIdRatio(0.5)])
def test_the_sdk_samplers_take_the_saving_and_drop_nothing_extra(sampler, monkeypatch):
    """A span the sampler drops leaves no attributes waiting for the next one."""
    provider = TracerProvider(sampler=sampler)
    _, exported = _pipeline(monkeypatch, provider)
    assert _runtime.starter()[2] is not None
    other = TracerProvider().get_tracer("other")  # another provider's span on this thread, after each
    kept = 0
    for i in range(64):
        span = _spans.start_span(f"s{i}", {"i": i})
        assert not span.is_recording() or dict(span.attributes) == {"i": i}
        kept += span.is_recording()
        span.end()
        assert not _runtime.PENDING
        assert dict(other.start_span("o").attributes) == {}
    assert len(exported.get_finished_spans()) == kept
    assert [dict(s.attributes)["i"] for s in exported.get_finished_spans()] == [
        int(s.name[1:]) for s in exported.get_finished_spans()]


def test_attributes_reach_their_span_if_a_processor_is_put_before_ours(monkeypatch):
    """Code that reorders the provider's processors after the first span: from then on the
    attributes go through start_span, so the processor now first sees them."""
    provider = TracerProvider()
    pipe, exported = _pipeline(monkeypatch, provider)
    assert _spans.start_span("s", {"a": 1}).attributes["a"] == 1
    first = Seen()
    multi = provider._active_span_processor
    multi._span_processors = (first,) + multi._span_processors
    span = _spans.start_span("t", {"a": 2})
    assert dict(span.attributes) == {"a": 2}
    assert first.at_start == [("t", {"a": 2})]
    assert not _runtime.PENDING


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
    assert not _runtime.PENDING


@pytest.mark.parametrize("value", [None, "", "é", 0, -1, 10**30, True, 2.5, float("nan"), [], ["a"], ("a", "b"),
                                   ["a", 1], [None], _Str("s"), b"x", {"k": 1}])
def test_sdk_plain_is_what_the_sdk_stores(value):
    from opentelemetry.attributes import BoundedAttributes

    from otel_assay.capture._capturec import clean_plain, sdk_plain

    attrs = {"k": value}
    ready = sdk_plain(attrs)
    if clean_plain(attrs) is None:
        assert ready is None
        return
    stored = BoundedAttributes(128, clean_plain(attrs), immutable=False)
    assert list(ready.items()) == list(stored.items())
    assert [type(v) for v in ready.values()] == [type(v) for v in stored.values()]
    assert sdk_plain({"": 1}) is None and sdk_plain([("k", 1)]) is None


def test_a_forked_child_starts_with_nothing_pending():
    """A thread of the parent, mid-start at the fork, leaves its attributes under its thread
    id; a thread of the child may get that id."""
    import os

    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    _runtime.PENDING[12345] = ["s", 1, {"stale": 1}]
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit code
            os._exit(0 if not _runtime.PENDING else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        _runtime.PENDING.pop(12345, None)


class SpanningIds:
    """An id generator that starts a span of its own (through the SDK's start_span, or ours)
    while our span is being started: that span must not take our span's attributes."""

    def __init__(self, ours: bool):
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
        self.ids, self.ours, self.inner, self.busy = RandomIdGenerator(), ours, [], False
        self.provider = None

    def generate_trace_id(self):
        return self.ids.generate_trace_id()

    def is_trace_id_random(self):
        return True

    def generate_span_id(self):
        if not self.busy:
            self.busy = True
            try:
                if self.ours:
                    inner = _spans.start_span("id-lookup", {"obj": {"x": 1}, "k": "inner"})
                else:
                    inner = self.provider.get_tracer("other").start_span("id-lookup", attributes={"k": "inner"})
                self.inner.append(inner)
            finally:
                self.busy = False
        return self.ids.generate_span_id()


@pytest.mark.parametrize("ours", [False, True])
def test_a_span_started_while_ours_starts_keeps_its_own_attributes(ours, monkeypatch):
    ids = SpanningIds(ours)
    provider = ids.provider = TracerProvider(id_generator=ids)
    _pipeline(monkeypatch, provider)
    span = _spans.start_span("chat m", {"gen_ai.request.model": "m", "n": 1})
    assert dict(span.attributes) == {"gen_ai.request.model": "m", "n": 1}
    assert len(ids.inner) == 1
    assert dict(ids.inner[0].attributes) == ({"obj": '{"x": 1}', "k": "inner"} if ours else {"k": "inner"})
    assert not _runtime.PENDING


def test_a_span_started_by_a_collection_keeps_its_own_attributes(monkeypatch):
    """A garbage collector callback runs inside whatever allocation reaches the threshold,
    here inside every start."""
    import gc

    provider = TracerProvider()
    _pipeline(monkeypatch, provider)
    other = provider.get_tracer("gc")
    made = []

    def on_gc(phase, info):
        if phase == "stop":
            made.append(other.start_span("collection", attributes={"generation": info["generation"]}))

    threshold = gc.get_threshold()
    gc.callbacks.append(on_gc)
    gc.set_threshold(1)
    try:
        spans = [_spans.start_span(f"step{i}", {"i": i, "model": "m"}) for i in range(100)]
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(on_gc)
    assert made, "no collection ran"
    for i, s in enumerate(spans):
        assert dict(s.attributes) == {"i": i, "model": "m"}
    for s in made:
        assert set(s.attributes) == {"generation"}
    assert not _runtime.PENDING


def test_attributes_not_taken_at_the_start_are_set_after_it(monkeypatch):
    """An SDK that hands our on_start a span it does not recognise (its name or start time
    stored otherwise than given): the attributes are set late, not lost."""
    provider = TracerProvider()
    _pipeline(monkeypatch, provider)
    monkeypatch.setattr(_runtime.AssayAttributesProcessor, "on_start", lambda self, span, parent_context=None: None)
    span = _spans.start_span("s", {"a": 1, "reasons": ["stop"]})
    assert dict(span.attributes) == {"a": 1, "reasons": ("stop",)}
    assert not _runtime.PENDING
