"""The exporter's compiled converter (``compiled.convert_sdk``, ``_otlpc.convert_sdk``) against
the Python path it stands in for (``SpanBatch.add_sdk_span``), on real SDK spans.

Whatever the compiled converter takes must come out exactly as the Python path stores it:
the same rows, values, nulls and types. Spans come from real TracerProviders (two
resources, several instrumentation scopes) with generated names, kinds, statuses, parents
and attributes of every type (strings with quotes, backslashes, control characters and
non-ASCII text, arrays, promoted keys given values of the wrong type, floats that are not
finite), with a fixed seed. What it must decline (events, links, a trace state, a value over
a limit, text that is not valid UTF-8, a span of another class, a span not ended) goes to
the Python path, and through the exporter both end up the same in the lake.
"""

from __future__ import annotations

import copy
import enum
import math
import os
import random

import pytest
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.span import TraceState

from otel_assay import semconv
from otel_assay.analyze.engine import Engine
from otel_assay.collect import compiled
from otel_assay.collect.exporter import ParquetSpanExporter
from otel_assay.lake.rows import SpanBatch, make_resource
from otel_assay.lake.schema import DEFAULT_LIMITS, Limits

pytestmark = pytest.mark.skipif(
    os.environ.get("OTEL_ASSAY_PURE_PYTHON") == "1", reason="the compiled converter is turned off")

PROMOTED = {key: t for _col, key, t in semconv.PROMOTED_SPAN_ATTRIBUTES}
TEXTS = ["", "plain", 'a "quoted" \\ back', "tab\tnew\nline\rcr\x01\x1f\x7f", "ünïcödé ✓ 漢字 🙂", "x" * 300]


class Keep(SpanExporter):
    def __init__(self):
        self.spans: list[ReadableSpan] = []

    def export(self, spans):
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def value(rng: random.Random):
    return rng.choice([
        lambda: rng.choice(TEXTS),
        lambda: rng.choice([True, False]),
        lambda: rng.choice([0, -1, 7, 2**63 - 1, -(2**63)]),
        lambda: rng.choice([0.0, -0.0, 0.1, 1e300, 5e-324, float("inf"), float("-inf"), float("nan")]),
        lambda: tuple(rng.choice(TEXTS) for _ in range(rng.randrange(4))),
        lambda: [rng.choice(TEXTS) for _ in range(rng.randrange(3))],
        lambda: tuple(rng.choice([1, 2.5, True]) for _ in range(rng.randrange(1, 3))),
    ])()


def attributes(rng: random.Random) -> dict:
    keys = list(PROMOTED) + ["k", "custom.key", "ünï.key", "gen_ai.response.finish_reasons"]
    return {rng.choice(keys): value(rng) for _ in range(rng.randrange(10))}


def generated_spans(rng: random.Random, n: int) -> list[ReadableSpan]:
    keep = Keep()
    providers = []
    for service in ("svc-a", "svc-ü"):
        p = TracerProvider(resource=Resource.create({"service.name": service, "host.name": "h", "n": 3}))
        p.add_span_processor(SimpleSpanProcessor(keep))
        providers.append(p)
    tracers = [p.get_tracer(name, version) for p in providers
               for name, version in (("otel_assay", "1.0"), ("other.lib", None), ("", ""))]
    for _ in range(n):
        tracer = rng.choice(tracers)
        with tracer.start_as_current_span(rng.choice(TEXTS[:5]) or "root", kind=rng.choice(list(SpanKind)),
                                          attributes=attributes(rng)) as outer:
            for _ in range(rng.randrange(3)):
                inner = tracer.start_span(rng.choice(TEXTS[:5]), attributes=attributes(rng))
                code = rng.choice(list(StatusCode))
                inner.set_status(Status(code, rng.choice([None, "", "it failed", "ü"]) if code == StatusCode.ERROR else None))
                inner.end()
            outer.set_attribute("late", rng.choice(TEXTS))
    return keep.spans


def python_rows(spans, limits: Limits = DEFAULT_LIMITS):
    batch = SpanBatch(limits)
    prepared: dict[int, object] = {}
    for s in spans:
        res = prepared.setdefault(id(s.resource), make_resource(s.resource.attributes.items(), limits))
        batch.add_sdk_span(s, res)
    return batch.tables(), batch.rejected


def compiled_rows(spans, limits: Limits = DEFAULT_LIMITS, lake_order: bool = False):
    """(tables of the spans the compiled converter took, the spans it left)"""
    part, declined = compiled.convert_sdk(list(spans), limits, lambda r: make_resource(r.attributes.items(), limits),
                                          lake_order=lake_order)
    return part.tables(), declined


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def assert_same_tables(fast: dict, slow: dict) -> None:
    assert fast.keys() == slow.keys()
    for name in slow:
        assert fast[name].schema == slow[name].schema, name
        for col in slow[name].schema.names:
            assert same(fast[name][col].to_pylist(), slow[name][col].to_pylist()), (name, col)


def test_the_compiled_converter_is_built():
    assert compiled._otlpc is not None and hasattr(compiled._otlpc, "convert_sdk")


@pytest.mark.parametrize("seed", range(6))
def test_generated_spans_convert_alike(seed):
    rng = random.Random(seed)
    spans = generated_spans(rng, 60)
    slow, rejected = python_rows(spans)
    fast, declined = compiled_rows(spans)
    assert rejected == 0
    assert declined == [], "the compiled converter left plain spans to the Python path"
    assert_same_tables(fast, slow)
    assert fast["spans"].num_rows == len(spans)


def test_promoted_columns_and_limits_alike():
    keep = Keep()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=45))  # the SDK drops some too
    provider.add_span_processor(SimpleSpanProcessor(keep))
    tracer = provider.get_tracer("t")
    many = {f"key.{i}": i for i in range(50)}
    for attrs in [
        {"gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": "7", "gen_ai.request.model": "m"},
        {"gen_ai.usage.input_tokens": 5.5, "gen_ai.request.model": 3, "gen_ai.request.temperature": 1},
        {"gen_ai.request.temperature": float("nan"), "gen_ai.usage.input_tokens": True},
        {**many, "k" * 20: "long key"},
    ]:
        tracer.start_span("s", attributes=attrs).end()
    limits = Limits(max_attributes=10, max_key_chars=12)
    slow, _ = python_rows(keep.spans, limits)
    fast, declined = compiled_rows(keep.spans, limits)
    assert declined == []
    assert_same_tables(fast, slow)
    # 51 attributes, 45 the SDK kept, 10 of them stored
    assert fast["spans"]["dropped_attributes_count"].to_pylist()[-1] == 41


def test_what_the_compiled_converter_declines_goes_to_the_python_path():
    keep = Keep()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(keep))
    tracer = provider.get_tracer("t")
    plain = tracer.start_span("plain")
    plain.end()
    span = tracer.start_span("with an event")
    span.add_event("e", {"a": 1})
    span.end()
    with tracer.start_as_current_span("linked") as target:
        ctx = target.get_span_context()
    tracer.start_span("with a link", links=[Link(ctx)]).end()
    tracer.start_span("long", attributes={"gen_ai.request.model": "m", "a": 1, "b": "x", "k": "v" * 300_000}).end()
    tracer.start_span("bad \ud800 name").end()
    tracer.start_span("s", attributes={"k": "\udfff"}).end()
    by_name = {s.name: s for s in keep.spans}
    sc = plain.get_span_context()
    from opentelemetry.trace import SpanContext, TraceFlags
    stated = SpanContext(sc.trace_id, sc.span_id, False, TraceFlags(1), TraceState([("vendor", "v1")]))
    Mine = type("Mine", (ReadableSpan,), {})
    declined = {
        "an event": by_name["with an event"],
        "a link": by_name["with a link"],
        "a value over the limit": by_name["long"],
        "a name that is not UTF-8": by_name["bad \ud800 name"],
        "an attribute that is not UTF-8": keep.spans[-1],
        "a trace state": ReadableSpan(name="st", context=stated, start_time=1, end_time=2, resource=plain.resource),
        "a span not ended": ReadableSpan(name="open", context=sc, start_time=1, resource=plain.resource),
        "another span class": Mine(name="mine", context=sc, start_time=1, end_time=2, resource=plain.resource),
    }
    plain_rows, left = compiled_rows([plain])
    assert left == [] and plain_rows["spans"].num_rows == 1
    for label, bad in declined.items():
        # the span is left to the Python path, whatever it had written taken back; the batch's
        # other spans are taken, before and after it
        fast, left = compiled_rows([plain, bad, plain])
        assert left == [bad], label
        assert_same_tables(fast, python_rows([plain, plain])[0])
        # the Python path stores it (or rejects it) as it always did
        slow, rejected = python_rows([bad])
        assert slow["spans"].num_rows + rejected == 1, label


class Text(str):
    """A str subclass: the Python path promotes it by isinstance(), the converter leaves it."""


class Level(enum.IntEnum):
    HIGH = 7


class Shown:
    def __str__(self) -> str:
        return 'shown "object"'


def hostile_value(rng: random.Random):
    return rng.choice([
        lambda: Text(rng.choice(TEXTS)), lambda: Level.HIGH, lambda: Shown(), lambda: b"\x00\xff",
        lambda: {"nested": [1, "ü"]}, lambda: None, lambda: 2**70, lambda: -(2**63) - 1, lambda: ("a", 1),
        lambda: ["a", Text("b")], lambda: (), lambda: rng.choice(TEXTS), lambda: 3.5, lambda: True,
        lambda: (rng.choice(TEXTS), rng.choice(TEXTS)),  # over the 40-character limit, or not
    ])()


def test_values_only_other_code_puts_on_a_span_convert_alike():
    # the SDK cleans the values it is given; code that fills an ended span's dict itself (or a
    # broken SDK) can hold anything: the converter stores it as the Python path does, or
    # leaves the span to it
    rng = random.Random(5)
    keep = Keep()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(keep))
    tracer = provider.get_tracer("t")
    for i in range(400):
        tracer.start_span(f"s{i}").end()
        d = keep.spans[-1]._attributes._dict
        for _ in range(rng.randrange(1, 6)):
            d[rng.choice(list(PROMOTED) + ["k", "other.key"])] = hostile_value(rng)
    limits = Limits(max_attributes=4, max_value_chars=40)
    fast, left = compiled_rows(keep.spans, limits)
    slow_left, _ = python_rows(left, limits)
    slow, rejected = python_rows(keep.spans, limits)
    assert rejected == 0 and 50 < len(left) < 350  # both paths are exercised

    def rows(tables):
        return sorted(tables["spans"].to_pylist(), key=lambda r: r["span_id"])

    assert same(sorted(rows(fast) + rows(slow_left), key=lambda r: r["span_id"]), rows(slow))


def test_a_value_whose_text_fails_is_rejected_with_its_reason(tmp_path):
    class Broken:
        def __str__(self) -> str:
            raise ValueError("no text for this value")

    keep = Keep()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(keep))
    tracer = provider.get_tracer("t")
    tracer.start_span("plain").end()
    tracer.start_span("broken").end()
    keep.spans[-1]._attributes._dict["k"] = Broken()
    fast, left = compiled_rows(keep.spans)
    assert fast["spans"]["name"].to_pylist() == ["plain"] and left == [keep.spans[-1]]
    exporter = ParquetSpanExporter(tmp_path / "lake")
    exporter.export(keep.spans)
    exporter.shutdown()
    assert (exporter.spans_written, exporter.spans_rejected) == (1, 1)


def test_a_flush_whose_tables_fail_counts_its_spans_lost_and_goes_on(tmp_path, monkeypatch, caplog):
    spans = generated_spans(random.Random(3), 5)
    exporter = ParquetSpanExporter(tmp_path / "lake")
    exporter.export(spans)

    def broken(self, keep=None):
        raise ValueError("broken tables")

    with monkeypatch.context() as m:
        m.setattr(compiled.CompiledBatch, "tables", broken)
        assert exporter.force_flush()
    exporter.export(spans)
    exporter.shutdown()
    assert (exporter.spans_lost, exporter.spans_written) == (len(spans), len(spans))
    assert "could not be made into tables (ValueError: broken tables)" in caplog.text


def test_unusual_resources_and_limits_convert_alike():
    keep = Keep()
    for attrs in ({"service.name": "svc-\ud800"}, {"service.name": "svc", "big": 2**70}):
        p = TracerProvider(resource=Resource.create(attrs))
        p.add_span_processor(SimpleSpanProcessor(keep))
        p.get_tracer("t").start_span("s", attributes={"n": 1234567890123, "f": 0.1 + 0.2, "b": False}).end()
    for limits in (Limits(max_value_chars=8), Limits(max_value_chars=4), DEFAULT_LIMITS):
        fast, left = compiled_rows(keep.spans, limits)
        slow_left, _ = python_rows(left, limits)
        slow, _ = python_rows(keep.spans, limits)

        def rows(tables):
            return sorted(tables["spans"].to_pylist(), key=lambda r: r["span_id"])

        assert same(sorted(rows(fast) + rows(slow_left), key=lambda r: r["span_id"]), rows(slow))
        assert len(left) == (0 if limits is DEFAULT_LIMITS else 2)  # numbers over the limit are cut: Python's
    # a key the negative limit drops in Python: the compiled converter leaves such limits alone
    assert compiled.convert_sdk(keep.spans, Limits(max_key_chars=-1), lambda r: None) is None


def test_python_code_that_changes_the_span_leaves_it_to_the_python_path():
    keep = Keep()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(keep))
    provider.get_tracer("t").start_span("s").end()
    d = keep.spans[-1]._attributes._dict

    class Evil:  # frees the key being read, keeps the size (a use-after-free before it was held)
        def __str__(self) -> str:
            k = next(iter(d))
            del d[k]
            d["z" * 100] = "y"
            return "evil"

    d["".join(["dyn", "amic.key"])] = Evil()  # built, not a literal the code object keeps alive
    d["after"] = "x"
    fast, left = compiled_rows(keep.spans)
    assert left == keep.spans and fast["spans"].num_rows == 0


def test_the_exporter_writes_the_same_lake_either_way(tmp_path, monkeypatch):
    rng = random.Random(11)
    spans = generated_spans(rng, 300)
    # a span with an event in the middle: that batch goes to the Python path
    keep = Keep()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(keep))
    s = provider.get_tracer("t").start_span("with an event")
    s.add_event("e", {"a": "b"})
    s.end()
    spans = spans[:400] + keep.spans + spans[400:]
    lakes = {}
    real = compiled.convert_sdk
    for mode in ("compiled", "python"):
        if mode == "python":
            monkeypatch.setenv("OTEL_ASSAY_PURE_PYTHON", "1")
        converted = []
        monkeypatch.setattr(compiled, "convert_sdk",
                            lambda *a, seen=converted, **kw: seen.append(r := real(*a, **kw)) or r)
        exporter = ParquetSpanExporter(tmp_path / mode, max_age_s=3600)
        for i in range(0, len(spans), 37):
            exporter.export(spans[i:i + 37])
        exporter.shutdown()
        assert exporter.spans_written == len(spans) and exporter.spans_rejected == 0
        if mode == "compiled":  # the compiled converter took every span but the one with an event
            assert len(converted) == 2  # a batch when 512 were held, the rest at shutdown
            assert sum(len(part) + len(left) for part, left in converted) == len(spans)
            assert sum(len(left) for _part, left in converted) == 1
        else:
            assert converted == [None, None]
        with Engine(tmp_path / mode) as eng:
            lakes[mode] = {t: eng.query(f"SELECT * EXCLUDE (span_row) FROM lake_{t} ORDER BY ALL" if t == "spans"
                                        else f"SELECT * FROM lake_{t} ORDER BY ALL").to_pylist()
                           for t in ("spans", "span_events")}
    assert len(lakes["compiled"]["spans"]) == len(spans)
    assert same(lakes["compiled"], lakes["python"])


def odd_spans(resource) -> list[ReadableSpan]:
    """Spans the converter declines for their ids or times, of the class it reads."""
    from opentelemetry.trace import SpanContext, TraceFlags

    def span(trace_id, span_id, start=5, end=6):
        ctx = SpanContext(trace_id, span_id, False, TraceFlags(1))
        return ReadableSpan(name="odd", context=ctx, start_time=start, end_time=end, resource=resource)

    return [span(2**128 + 5, 1), span(-3, 1), span(7, 2**64 + 1), span(7, -1), span(0, 1), span(7, 0),
            span(7, 1, start=0), span(7, 1, start=2**64), span(7, 1, start=None, end=None)]


@pytest.mark.parametrize("seed", range(4))
def test_lake_order_gives_the_rows_sorted_as_the_lake_writes_them(seed):
    rng = random.Random(seed)
    spans = generated_spans(rng, 80)
    # ties on every key (a span sent twice, as a retrying exporter does): their rows keep the
    # order they came in
    twin = spans[0]
    ties = [copy.copy(twin) for _ in range(3)]
    for i, tie in enumerate(ties):
        tie._name, tie._attributes = f"tie{i}", BoundedAttributes(attributes={"i": i}, immutable=True)
    spans += ties + odd_spans(twin.resource)
    rng.shuffle(spans)
    given, left_given = compiled_rows(spans)
    ordered, left_ordered = compiled_rows(spans, lake_order=True)
    # the same rows, sorted (stably) by the lake's keys; the same spans left to the Python path
    rows = given["spans"].to_pylist()
    expected = sorted(rows, key=lambda r: (r["trace_id"], r["start_time_unix_nano"], r["span_id"]))
    assert expected != rows, "the spans came in the lake's order already: nothing was tested"
    assert same(ordered["spans"].to_pylist(), expected)
    tie_names = [r["name"] for r in ordered["spans"].to_pylist() if r["name"].startswith("tie")]
    assert tie_names == [s.name for s in spans if s.name.startswith("tie")]
    assert sorted(map(id, left_ordered)) == sorted(map(id, left_given))
    assert len(left_given) == len(odd_spans(twin.resource))


def test_a_flush_of_one_part_is_written_without_reordering(tmp_path, monkeypatch):
    from otel_assay.lake import files as lake

    taken = []
    real_take = lake._take
    monkeypatch.setattr(lake, "_take", lambda table, order: taken.append(len(order)) or real_take(table, order))
    spans = generated_spans(random.Random(21), 40)
    random.Random(1).shuffle(spans)
    for mode in ("compiled", "python"):
        if mode == "python":
            monkeypatch.setenv("OTEL_ASSAY_PURE_PYTHON", "1")
        taken.clear()
        exporter = ParquetSpanExporter(tmp_path / mode, max_age_s=3600)
        exporter.export(spans)
        exporter.shutdown()
        assert exporter.spans_written == len(spans)
        # the compiled converter gives the rows in order; the Python path's are reordered
        assert taken == ([] if mode == "compiled" else [len(spans)]), mode
        with Engine(tmp_path / mode) as eng:
            stored = eng.query("SELECT trace_id, start_time_unix_nano, span_id FROM lake_spans ORDER BY span_row")
        keys = list(zip(*(stored[c].to_pylist() for c in stored.column_names)))
        assert keys == sorted(keys), mode


class InterruptedOnce:
    """A value whose first str() is a Ctrl-C, as when the user presses it during a flush."""

    def __init__(self):
        self.calls = 0

    def __str__(self) -> str:
        self.calls += 1
        if self.calls == 1:
            raise KeyboardInterrupt
        return "shown after the interrupt"


@pytest.mark.parametrize("mode", ["compiled", "python"])
def test_ctrl_c_while_spans_are_converted_loses_none_of_them(tmp_path, monkeypatch, mode):
    if mode == "python":
        monkeypatch.setenv("OTEL_ASSAY_PURE_PYTHON", "1")
    spans = generated_spans(random.Random(8), 300)
    assert len(spans) > 512  # export() converts when 512 are held: the interrupt reaches the agent's call
    value = InterruptedOnce()
    odd = spans[len(spans) // 2]
    odd._attributes._dict["odd.value"] = value
    exporter = ParquetSpanExporter(tmp_path / "lake", max_age_s=3600)
    with pytest.raises(KeyboardInterrupt):
        exporter.export(spans)
    assert value.calls == 1
    exporter.shutdown()  # the flush at exit
    assert (exporter.spans_written, exporter.spans_rejected, exporter.spans_lost) == (len(spans), 0, 0)
    # every span once, each with its own attributes: the interrupted row was taken back whole
    clean = ParquetSpanExporter(tmp_path / "clean", max_age_s=3600)
    odd._attributes._dict["odd.value"] = "shown after the interrupt"
    clean.export(spans)
    clean.shutdown()
    with Engine(tmp_path / "lake") as got, Engine(tmp_path / "clean") as want:
        query = "SELECT * EXCLUDE (span_row) FROM lake_spans ORDER BY ALL"
        assert same(got.query(query).to_pylist(), want.query(query).to_pylist())


def spans_with_events(n: int) -> list[ReadableSpan]:
    """Spans the compiled converter leaves to the Python path (each has an event)."""
    keep = Keep()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(keep))
    tracer = provider.get_tracer("t")
    for i in range(n):
        with tracer.start_as_current_span(f"s{i}") as s:
            s.add_event("e", {"i": i})
    return keep.spans


def test_ctrl_c_between_two_spans_of_the_python_path_loses_none_of_them(tmp_path):
    # Python handles a signal at a loop's jump back, among other places: Ctrl-C there, after
    # each span in turn, must leave every span either stored or held, once
    import dis
    import sys

    from otel_assay.collect.exporter import ParquetSpanExporter as Exporter

    jumps = {i.offset for i in dis.get_instructions(Exporter._convert_held) if i.opname == "JUMP_BACKWARD"}
    if not jumps:
        pytest.skip("no JUMP_BACKWARD on this Python version")
    spans = spans_with_events(6)
    for k in range(1, len(spans) + 1):
        seen = [0]

        def tracer(frame, event, arg, k=k, seen=seen):
            if frame.f_code is not Exporter._convert_held.__code__:
                return None
            frame.f_trace_opcodes = True

            def local(f, ev, a):
                if ev == "opcode" and f.f_lasti in jumps:
                    seen[0] += 1
                    if seen[0] == k:
                        raise KeyboardInterrupt
                return local
            return local

        exporter = ParquetSpanExporter(tmp_path / f"lake{k}", max_age_s=3600)
        exporter.export(spans)
        sys.settrace(tracer)
        try:
            with pytest.raises(KeyboardInterrupt):
                exporter.force_flush()
        finally:
            sys.settrace(None)
        exporter.shutdown()
        assert (exporter.spans_written, exporter.spans_rejected, exporter.spans_lost) == (len(spans), 0, 0), k
        with Engine(tmp_path / f"lake{k}") as eng:
            names = eng.query("SELECT name FROM lake_spans")["name"].to_pylist()
        assert sorted(names) == sorted(s.name for s in spans), k


class ExitsWhenShown:
    """A value whose str() raises a BaseException that is no Ctrl-C, every time."""

    def __str__(self) -> str:
        raise SystemExit(3)


@pytest.mark.parametrize("mode", ["compiled", "python"])
def test_a_value_raising_systemexit_rejects_its_span_and_exits_once(tmp_path, monkeypatch, mode):
    # an exit is not swallowed (a SIGTERM handler calling sys.exit() may land in a value's
    # str() too), and not raised again at every flush: the span is rejected, the rest stored
    if mode == "python":
        monkeypatch.setenv("OTEL_ASSAY_PURE_PYTHON", "1")
    spans = generated_spans(random.Random(9), 300)
    odd = spans[7]
    odd._attributes._dict["odd.value"] = ExitsWhenShown()
    exporter = ParquetSpanExporter(tmp_path / "lake", max_age_s=3600)
    with pytest.raises(SystemExit):
        exporter.export(spans)  # converted when 512 are held: here
    exporter.shutdown()
    assert (exporter.spans_written, exporter.spans_rejected, exporter.spans_lost) == (len(spans) - 1, 1, 0)


def test_spans_left_to_the_python_path_keep_their_order(tmp_path, monkeypatch):
    # two sends of one span (same ids, different starts) whose events tie on the lake's keys:
    # the compiled converter sorts what it converts, not what it leaves, so both lakes store
    # the events in the order given
    from opentelemetry.sdk.trace import Event
    from opentelemetry.trace import SpanContext, TraceFlags

    resource = generated_spans(random.Random(1), 1)[0].resource
    ctx = SpanContext(0xABC, 0x77, False, TraceFlags(1))
    sends = [ReadableSpan(name="dup", context=ctx, start_time=start, end_time=start + 10, resource=resource,
                          events=[Event(label, {}, timestamp=5000)])
             for start, label in ((2000, "first-given"), (1000, "second-given"))]
    for mode in ("compiled", "python"):
        if mode == "python":
            monkeypatch.setenv("OTEL_ASSAY_PURE_PYTHON", "1")
        exporter = ParquetSpanExporter(tmp_path / mode, max_age_s=3600)
        exporter.export(sends)
        exporter.shutdown()
        with Engine(tmp_path / mode) as eng:
            # one file, read in its row order
            names = eng.query("SELECT name FROM lake_span_events")["name"].to_pylist()
        assert names == ["first-given", "second-given"], mode


def test_ctrl_c_during_the_last_flush_counts_what_it_did_not_write(tmp_path, monkeypatch):
    from otel_assay.lake.files import Lake

    def interrupted(self, tables, **kw):
        raise KeyboardInterrupt

    spans = generated_spans(random.Random(4), 20)
    exporter = ParquetSpanExporter(tmp_path / "lake", max_age_s=3600)
    exporter.export(spans)
    monkeypatch.setattr(Lake, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        exporter.shutdown()
    assert (exporter.spans_written, exporter.spans_lost) == (0, len(spans))
