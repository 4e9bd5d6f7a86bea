"""_runtime.Recorder: where only our processor sees spans, ``_spans.start_span`` builds the
SDK's span as ``tracer.start_span`` builds it, with our processor's ``on_start`` done (a tool
call's span, which the tool's own spans nest under), and ``_spans.record_span`` builds a span
that starts and ends at once as the ReadableSpan the SDK would hand our processor; everywhere
else the SDK makes them. Each test makes the two on the same provider, parent and
attributes; a started span's fields are compared live, then both are used the same way
(attributes, events, an exception, a link, a new name, a status) and ended, and what our
processor exported is compared: real SDK providers, samplers and processors, and the real
Parquet exporter for the lake's rows."""

import logging
import random
import warnings

import pyarrow.parquet as pq
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from otel_assay import semconv
from otel_assay.capture import _runtime, _spans
from otel_assay.collect.exporter import ParquetSpanExporter

from ._recorder import (ATTRS, CHAT, LIMITS, PARENTS, REMOTE_ID, SAMPLERS, TRIAL, Pipe, Seen, events, kept,
                        parent_of, pipe_and_root, provider_adding, same)

pytestmark = pytest.mark.skipif(_spans._sdk_plain is None, reason="capture's compiled helpers are not built")

LINKED = SpanContext(REMOTE_ID, 0x1111, True, TraceFlags(TraceFlags.SAMPLED))
FAILURE = ValueError("tool failed")  # one exception for both spans: the same stack trace


def started_twice(pipe, monkeypatch, name, attrs, ctx, **kw):
    """start_span as it runs, then with the Recorder turned off (the SDK starts the span and
    calls our processor's on_start): both spans, and whether the first took the Recorder.
    The second is also compared with a span the SDK starts plainly, given the cleaned
    attributes (as any instrumentation's)."""
    before = pipe.sdk_calls
    a = _spans.start_span(name, attrs, parent=ctx, **kw)
    fast = pipe.sdk_calls == before
    with monkeypatch.context() as m:
        m.setattr(_runtime, "recorder", lambda name="otel_assay": None)
        b = _spans.start_span(name, attrs, parent=ctx, **kw)
    assert pipe.sdk_calls == before + 1 + (not fast)
    # never ended: nothing exported
    context = ctx if isinstance(ctx, otel_context.Context) else trace.set_span_in_context(ctx)
    plain = pipe.pipe.tracer().start_span(name, context=context, attributes=_spans.clean(attrs), **kw)
    if ctx:  # not a root span, whose trace id is its own
        same_live(plain, b)
    return a, b, fast


def same_live(a, b):
    """Every field of two started spans: the same class, fields in the same order, equal
    values (the same object where the SDK shares one), and locks, attribute dicts and event
    and link lists of their own, but for the span id."""
    assert type(a) is type(b)
    if not isinstance(a, sdk_trace.ReadableSpan):  # not recorded: both NonRecordingSpans
        same_context(a.get_span_context(), b.get_span_context())
        return
    va, vb = vars(a), vars(b)
    assert list(va) == list(vb)
    for k in va:
        x, y = va[k], vb[k]
        if k == "_context":
            same_context(x, y)
        elif k == "_lock":
            assert type(x) is type(y) and x is not y and not x.locked() and not y.locked()
        elif k == "_attributes":
            assert type(x) is type(y) and x is not y
            ax, ay = vars(x), vars(y)
            assert list(ax) == list(ay)
            for kk in ax:
                if kk == "_lock":
                    assert type(ax[kk]) is type(ay[kk]) and ax[kk] is not ay[kk]
                elif kk == "_dict":
                    assert list(ax[kk].items()) == list(ay[kk].items()) and ax[kk] is not ay[kk]
                    assert [type(v) for v in ax[kk].values()] == [type(v) for v in ay[kk].values()]
                else:
                    assert ax[kk] == ay[kk], kk
        elif k in ("_events", "_links"):
            assert type(x) is type(y) and x is not y and x._dq is not y._dq
            assert (x._dq.maxlen, x.dropped, list(x)) == (y._dq.maxlen, y.dropped, list(y))
        elif k in ("_resource", "_sampler", "_span_processor", "_limits", "_status", "_record_end_metrics",
                   "_instrumentation_scope", "_instrumentation_info"):
            assert x is y, k
        else:
            assert x == y and type(x) is type(y), k


def same_context(x, y):
    assert (x.trace_id, x.is_remote, x.trace_flags, x.trace_state) == (
        y.trace_id, y.is_remote, y.trace_flags, y.trace_state)
    assert x.span_id != y.span_id and x.is_valid


def use(span):
    """What a tool's code and our adapter may do to the span in the tool's context."""
    span.set_attribute("later", "x")
    span.set_attributes({"n": 2, "f": 1.5, "tags": ["a", "b"]})
    span.add_event("retry", {"attempt": 1}, timestamp=7)
    span.record_exception(FAILURE, timestamp=8)
    span.add_link(LINKED, {"why": "caused by"})
    span.update_name("execute_tool renamed")
    span.set_status(Status(StatusCode.ERROR, "tool failed"))
    span.end(end_time=9_000_000_000)


def ended(pipe, a, b):
    """The two spans our processor exported for a and b (None where it exported none)."""
    spans = {s.context.span_id: s for s in pipe.exported.get_finished_spans()}
    return tuple(spans.get(s.get_span_context().span_id) if s.get_span_context().is_valid else None for s in (a, b))


def made_twice(how, pipe, monkeypatch, name, attrs, ctx, *, used=True, **kw):
    """The spans exported for a span recorded (``record_span``) or started (``start_span``),
    first as it runs, then by the SDK; and whether the first took the Recorder. Started
    spans are compared live (but for a root span, whose trace id is its own), then used
    alike (``use``) or, with ``used=False``, ended at once."""
    if how == "record":
        return pipe.twice(monkeypatch, name, attrs, ctx, **kw)
    a, b, fast = started_twice(pipe, monkeypatch, name, attrs, ctx, **kw)
    if ctx:
        same_live(a, b)
    for span in (a, b):
        use(span) if used else span.end(end_time=kw["start_time"] + 1)
    return (*ended(pipe, a, b), fast)


@pytest.mark.parametrize("parent", PARENTS)
@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("in_trial", [False, True])
@pytest.mark.parametrize("how", ["record", "start"])
def test_the_same_span_as_the_sdk_over_samplers_and_parents(how, parent, sampler, in_trial, monkeypatch):
    provider = TracerProvider(sampler=SAMPLERS[sampler])
    pipe = Pipe(monkeypatch, provider)
    ctx, trace_id, root = parent_of(parent, provider.get_tracer("app"))
    if in_trial and trace_id is not None:
        _runtime.register_trace(trace_id, TRIAL)
    try:
        x, y, fast = made_twice(how, pipe, monkeypatch, "chat m-1", CHAT, ctx, kind=SpanKind.CLIENT,
                                start_time=1_000_000_000)
    finally:
        if trace_id is not None:
            _runtime.unregister_trace(trace_id)
    if parent == "none" and "ratio" in sampler:  # two root spans, two trace ids, two decisions
        assert not fast
        return
    assert (x is None) == (y is None)
    if x is not None:
        same(x, y, root=parent == "none")
        if in_trial and trace_id is not None:
            assert x.attributes[semconv.ASSAY_SCENARIO] == "refund"
    # the Recorder takes every recorded span with a valid parent: the saving cannot go silently
    assert fast == (x is not None and parent != "none")
    if root is not None:
        root.end()


@pytest.mark.parametrize("limits", sorted(LIMITS))
@pytest.mark.parametrize("attrs", sorted(ATTRS))
@pytest.mark.parametrize("in_trial", [False, True])
@pytest.mark.parametrize("how", ["record", "start"])
def test_the_same_span_as_the_sdk_over_attributes_and_limits(how, attrs, limits, in_trial, monkeypatch):
    provider = TracerProvider(span_limits=LIMITS[limits])
    pipe, root = pipe_and_root(monkeypatch, provider)
    if in_trial:
        _runtime.register_trace(root.get_span_context().trace_id, TRIAL)
    try:
        x, y, fast = made_twice(how, pipe, monkeypatch, "s", ATTRS[attrs], trace.set_span_in_context(root),
                                kind=SpanKind.CLIENT, start_time=5)
    finally:
        _runtime.unregister_trace(root.get_span_context().trace_id)
    same(x, y)
    expected_fast = (limits != "length limit" and attrs not in ("an empty key", "an object", "a str subclass")
                     and not (in_trial and attrs == "a trial key")
                     and not (limits == "few attributes" and kept(ATTRS[attrs]) + len(TRIAL) * in_trial > 8))
    assert fast == expected_fast


def test_spans_of_the_tool_nest_under_it_and_take_the_trial(monkeypatch):
    """What the tool's code starts in the tool's context (any tracer of the provider) is the
    started span's child, in its trial."""
    provider = TracerProvider()
    pipe, root = pipe_and_root(monkeypatch, provider)
    trace_id = root.get_span_context().trace_id
    _runtime.register_trace(trace_id, TRIAL)
    try:
        tool = _spans.start_span("execute_tool lookup", {"n": 1}, parent=root)
        assert pipe.sdk_calls == 0
        with trace.use_span(tool):
            assert trace.get_current_span() is tool and tool.is_recording()
            with provider.get_tracer("http").start_as_current_span("GET /orders"):
                pass
        tool.end()
    finally:
        _runtime.unregister_trace(trace_id)
    child, parent = pipe.exported.get_finished_spans()
    assert child.parent == tool.get_span_context() and parent.parent == root.get_span_context()
    assert {k: child.attributes[k] for k in TRIAL} == TRIAL
    assert not tool.is_recording()


def test_an_exception_escaping_the_span_as_a_context_manager(monkeypatch):
    provider = TracerProvider()
    pipe, root = pipe_and_root(monkeypatch, provider)
    a, b, fast = started_twice(pipe, monkeypatch, "s", {"n": 1}, trace.set_span_in_context(root), start_time=5)
    assert fast
    for span in (a, b):
        with pytest.raises(ValueError), span:
            raise ValueError("tool failed")
    x, y = ended(pipe, a, b)
    assert x.status.status_code is StatusCode.ERROR and x.status.description == y.status.description
    # but for the time and the stack trace (each with its own line)
    (ex,), (ey,) = events(x, times=False), events(y, times=False)
    assert ex[2].pop("exception.stacktrace").endswith("ValueError: tool failed\n")
    ey[2].pop("exception.stacktrace")
    assert ex == ey and ex[0] == "exception" and ex[2]["exception.escaped"] == "True"


def test_links_are_left_to_the_sdk(monkeypatch):
    provider = TracerProvider()
    pipe, root = pipe_and_root(monkeypatch, provider)
    a, b, fast = started_twice(pipe, monkeypatch, "s", {"n": 1}, trace.set_span_in_context(root),
                               links=[Link(LINKED, {"k": "v"})], start_time=5)
    assert not fast
    same_live(a, b)


def test_a_processor_added_while_the_span_runs_sees_its_end_as_in_the_sdk(monkeypatch):
    """The SDK hands a span's end to the processors there are at its end."""
    provider = TracerProvider()
    pipe, root = pipe_and_root(monkeypatch, provider)
    a, b, fast = started_twice(pipe, monkeypatch, "s", {"n": 1}, trace.set_span_in_context(root), start_time=5)
    assert fast
    seen = Seen()
    provider.add_span_processor(seen)
    a.end(end_time=6), b.end(end_time=6)
    assert seen.started == [] and seen.ended == ["s", "s"]
    same(*ended(pipe, a, b))
    c = _spans.start_span("later", {"n": 2}, parent=root)  # two processors now: the SDK's span
    c.end()
    assert pipe.sdk_calls == 2 and seen.started == ["later"] and seen.ended == ["s", "s", "later"]


def test_a_processor_added_by_another_thread_while_starting_sees_the_start(monkeypatch):
    seen = Seen()
    provider, arm = provider_adding(seen)
    pipe, root = pipe_and_root(monkeypatch, provider)
    arm()
    span = _spans.start_span("s", {"n": 1}, parent=root)
    span.end()
    assert pipe.sdk_calls == 1 and seen.started == ["s"] and seen.ended == ["s"]


def test_an_application_provider_with_its_own_processor_starts_sdk_spans(monkeypatch):
    theirs = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(theirs))
    pipe, root = pipe_and_root(monkeypatch, provider)
    _spans.start_span("execute_tool t", {"n": 1}, parent=root).end()
    assert pipe.sdk_calls == 1
    assert [s.name for s in theirs.get_finished_spans()] == [s.name for s in pipe.exported.get_finished_spans()]


@pytest.mark.parametrize("change", ["a field more", "a field shared no more"])
def test_an_sdk_span_with_fields_this_does_not_know_is_left_to_the_sdk(change, monkeypatch):
    """A later SDK may give its spans a field more, or give each span its own value of a
    field every span shared: the Recorder then starts none (model calls, built as
    ReadableSpans through its public constructor, are still recorded)."""
    init = sdk_trace.ReadableSpan.__init__

    def changed(self, *a, **kw):
        init(self, *a, **kw)
        if change == "a field more":
            self._a_new_field = "set by the SDK"
        else:
            self._status = Status(StatusCode.UNSET)  # one per span
    monkeypatch.setattr(sdk_trace.ReadableSpan, "__init__", changed)
    provider = TracerProvider()
    pipe, root = pipe_and_root(monkeypatch, provider)
    span = _spans.start_span("s", {"n": 1}, parent=root)
    assert _runtime.recorder().span_fields is None
    assert pipe.sdk_calls == 1 and type(span) is sdk_trace._Span
    span.end()
    _spans.record_span("chat m", {"n": 2}, parent=root)
    assert pipe.sdk_calls == 1
    assert [s.name for s in pipe.exported.get_finished_spans()] == ["s", "chat m"]


@pytest.mark.parametrize("where", ["Tracer.start_span", "Span.__init__", "Span.start", "Span.end"])
def test_code_that_wraps_the_sdks_span_functions_sees_every_span(where, monkeypatch):
    """A wrapper on the SDK's class (a profiler, another library) sees our spans: the
    Recorder, which would skip it, is off while it is there."""
    cls_name, fn_name = where.split(".")
    cls = sdk_trace.Tracer if cls_name == "Tracer" else sdk_trace.Span
    original = getattr(cls, fn_name)
    seen = []

    def wrapper(self, *a, **kw):
        result = original(self, *a, **kw)
        seen.append(a[0] if cls_name == "Tracer" else self.name)  # a span's name is set by __init__
        return result
    provider = TracerProvider()
    pipe, root = pipe_and_root(monkeypatch, provider)
    _spans.start_span("before", {"n": 1}, parent=root).end()  # the Recorder, learnt
    assert pipe.sdk_calls == 0
    monkeypatch.setattr(cls, fn_name, wrapper)
    seen.clear()
    _spans.start_span("tool", {"n": 1}, parent=root).end()
    _spans.record_span("chat", {"n": 2}, parent=root)
    assert pipe.sdk_calls == 2 and "probe" not in seen and {"tool", "chat"} <= set(seen)
    monkeypatch.setattr(cls, fn_name, original)
    _spans.start_span("after", {"n": 1}, parent=root).end()
    assert pipe.sdk_calls == 2


def test_a_wrapper_installed_before_otel_assay_is_seen_for_what_it_is():
    import functools
    original = sdk_trace.Tracer.start_span

    @functools.wraps(original)
    def wrapper(self, *a, **kw):
        return original(self, *a, **kw)
    assert _runtime._is_sdk_code(_runtime._sdk_code())
    assert not _runtime._is_sdk_code((wrapper,) + _runtime._sdk_code()[1:])


def test_a_wrapper_on_our_tracer_turns_the_recorder_off(monkeypatch):
    provider = TracerProvider()
    pipe = Pipe(monkeypatch, provider)
    tracer = pipe.pipe.tracer()
    tracer.start_span = lambda *a, real=tracer.start_span, **kw: real(*a, **kw)
    assert _runtime.recorder() is None


def test_the_fields_are_learnt_whatever_the_current_context(monkeypatch):
    """The SDK spans the fields are learnt from are root spans: a current span with flags
    the SDK fails on (a parent of another library's) does not turn start() off."""
    provider = TracerProvider()
    pipe = Pipe(monkeypatch, provider)
    odd = trace.set_span_in_context(NonRecordingSpan(SpanContext(REMOTE_ID, 5, True, 1)))  # an int, not TraceFlags
    token = otel_context_attach(odd)
    try:
        with pytest.raises(AttributeError):  # as from the SDK's own start_span
            _spans.start_span("s", {"n": 1})
    finally:
        otel_context_detach(token)
    assert _runtime.recorder().span_fields is not None
    root = provider.get_tracer("app").start_span("root")
    before = pipe.sdk_calls
    _spans.start_span("t", {"n": 1}, parent=root).end()
    assert pipe.sdk_calls == before


def test_a_tracer_disabled_at_first_learns_the_fields_once_enabled(monkeypatch):
    config = getattr(sdk_trace, "_TracerConfig", None)
    if config is None or not hasattr(sdk_trace.Tracer, "_set_tracer_config"):
        pytest.skip("this SDK cannot disable a tracer")
    provider = TracerProvider()
    pipe = Pipe(monkeypatch, provider)
    tracer = pipe.pipe.tracer()
    root = provider.get_tracer("app").start_span("root")
    tracer._set_tracer_config(config(is_enabled=False))
    assert not _spans.start_span("off", {"n": 1}, parent=root).is_recording()
    tracer._set_tracer_config(config(is_enabled=True))
    before = pipe.sdk_calls
    span = _spans.start_span("on", {"n": 1}, parent=root)
    span.end()
    assert pipe.sdk_calls == before and [s.name for s in pipe.exported.get_finished_spans()] == ["on"]


@pytest.mark.parametrize("how", ["record", "start"])
def test_limits_and_sampler_changed_after_the_first_span_are_read_at_each_span(how, monkeypatch):
    """The SDK reads the provider's span limits and the tracer's sampler at every span."""
    limits = SpanLimits()
    provider = TracerProvider(span_limits=limits)
    pipe, root = pipe_and_root(monkeypatch, provider)
    ctx = trace.set_span_in_context(root)
    assert made_twice(how, pipe, monkeypatch, "first", {"a": 1}, ctx, used=False, start_time=5)[2]
    limits.max_span_attribute_length = 3
    a, b, fast = made_twice(how, pipe, monkeypatch, "cut", {"t": "abcdefgh"}, ctx, used=False, start_time=5)
    assert not fast and a.attributes["t"] == b.attributes["t"] == "abc"
    limits.max_span_attribute_length = None
    limits.max_span_attributes = 1
    a, b, fast = made_twice(how, pipe, monkeypatch, "few", {"t": "x", "u": "y"}, ctx, used=False, start_time=5)
    assert not fast
    same(a, b)
    limits.max_span_attributes = 128
    pipe.pipe.tracer().sampler = sampling.ALWAYS_OFF
    before = len(pipe.exported.get_finished_spans())
    if how == "record":
        _spans.record_span("dropped", {"a": 1}, parent=ctx)
    else:
        _spans.start_span("dropped", {"a": 1}, parent=ctx).end()
    assert len(pipe.exported.get_finished_spans()) == before


@pytest.mark.parametrize("how", ["record", "start"])
def test_a_parent_with_flags_of_another_type_fails_as_in_the_sdk(how, monkeypatch):
    provider = TracerProvider()
    Pipe(monkeypatch, provider)
    ctx = trace.set_span_in_context(NonRecordingSpan(SpanContext(REMOTE_ID, 5, True, 1)))  # an int, not TraceFlags
    with pytest.raises(AttributeError):
        (_spans.record_span if how == "record" else _spans.start_span)("s", {"a": 1}, parent=ctx)


def test_learning_the_sdks_span_fields_draws_no_random_number_and_reaches_no_processor(monkeypatch, caplog):
    """The Recorder learns a span's fields from spans the SDK starts on a copy of the
    tracer: an application that seeded the random module (the SDK's ids come from it) gets
    the same numbers, no processor sees those spans, and nothing is logged or warned."""
    provider = TracerProvider()
    seen = Seen()
    provider.add_span_processor(seen)
    pipe = Pipe(monkeypatch, provider)
    random.seed(11)
    expected = random.getrandbits(64)
    random.seed(11)
    rec = _runtime.recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        caplog.set_level(logging.DEBUG)
        fields = _runtime._span_fields(rec.tracer, rec.multi)
    assert fields is not None and not caplog.records
    assert random.getrandbits(64) == expected
    assert seen.started == seen.ended == [] and pipe.proc.spans_ended == 0 and pipe.sdk_calls == 0


def test_the_lake_rows_are_the_same(tmp_path, monkeypatch):
    """Through the real Parquet exporter: the same rows but for the span id."""
    exporter = ParquetSpanExporter(tmp_path / "lake")
    provider = TracerProvider()
    pipe = Pipe(monkeypatch, provider, exporter)
    root = provider.get_tracer("app").start_span("root")
    _runtime.register_trace(root.get_span_context().trace_id, TRIAL)
    pairs = []
    try:
        for name, attrs in ATTRS.items():
            a, b, _ = started_twice(pipe, monkeypatch, name, attrs, trace.set_span_in_context(root),
                                    start_time=2_000_000_000)
            use(a), use(b)
            pairs.append([format(s.get_span_context().span_id, "016x") for s in (a, b)])
    finally:
        _runtime.unregister_trace(root.get_span_context().trace_id)
    assert pipe.sdk_calls < len(ATTRS) * 2  # some took the Recorder
    assert exporter.force_flush()
    files = [f for f in (tmp_path / "lake").rglob("*.parquet") if "/spans/" in f.as_posix()]
    rows = pq.read_table(files[0]).to_pylist()
    assert len(files) == 1 and len(rows) == 2 * len(ATTRS)
    by_id = {r.pop("span_id"): r for r in rows}
    for a, b in pairs:
        assert by_id[a] == by_id[b]


def test_a_root_span_and_an_unsampled_parent_are_left_to_the_sdk(monkeypatch):
    provider = TracerProvider()
    pipe = Pipe(monkeypatch, provider)
    root = _spans.start_span("assay.trial refund", {"n": 1}, parent=otel_context_empty())
    assert pipe.sdk_calls == 1 and root.is_recording()
    unsampled = trace.set_span_in_context(NonRecordingSpan(SpanContext(REMOTE_ID, 5, True, TraceFlags(0))))
    child = _spans.start_span("s", {"n": 1}, parent=unsampled)
    assert pipe.sdk_calls == 2 and not child.is_recording()


def otel_context_empty():
    return otel_context.Context()


def otel_context_attach(ctx):
    return otel_context.attach(ctx)


def otel_context_detach(token):
    otel_context.detach(token)


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("how", ["record", "start"])
def test_a_span_given_as_parent_takes_the_trial_from_the_current_contexts_baggage(how, sampler, monkeypatch):
    """A parent given as a span is put in the current context, as the SDK's start_span puts
    it: a trial propagated in that context's baggage (another process's) reaches the span,
    whether the sampler is asked (given that context) or answered from the parent."""
    from opentelemetry import baggage

    from otel_assay import semconv
    provider = TracerProvider(sampler=SAMPLERS[sampler])
    pipe = Pipe(monkeypatch, provider)
    root = provider.get_tracer("app").start_span("root")  # a trace no trial of this process has
    token = otel_context.attach(baggage.set_baggage(semconv.ASSAY_SCENARIO, "from-baggage",
                                                    baggage.set_baggage(semconv.ASSAY_TRIAL_INDEX, "7")))
    try:
        x, y, fast = made_twice(how, pipe, monkeypatch, "execute_tool t", {"n": 1}, root, used=False, start_time=5)
    finally:
        otel_context.detach(token)
    assert (x is None) == (y is None) and fast == (x is not None)
    if x is not None:
        same(x, y)
        assert x.attributes[semconv.ASSAY_SCENARIO] == "from-baggage"
        assert x.attributes[semconv.ASSAY_TRIAL_INDEX] == 7 and x.parent == root.get_span_context()
