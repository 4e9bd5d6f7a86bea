"""The receiver's compiled decoder (``_otlpc``) against its Python path, on the same bytes.

The compiled decoder may decline a request (None: the Python path takes it) but whatever it
reads must come out exactly as the Python path stores it: the same rows, values, nulls and
types, and the same dedupe keys. Requests are generated (every value type, unusual
characters, invalid ids and times, repeated keys, events and links) and mutated byte by byte,
with fixed seeds; the plain ones must take the compiled decoder, so these tests cannot pass
by the compiled decoder declining everything.
"""

from __future__ import annotations

import math
import os
import random

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
)

from otel_assay.collect import compiled, synthetic
from otel_assay.collect.otlp import MalformedOTLP, add_protobuf, parse_protobuf
from otel_assay.lake.rows import SpanBatch
from otel_assay.lake.schema import DEFAULT_LIMITS, Limits

pytestmark = pytest.mark.skipif(
    os.environ.get("OTEL_ASSAY_PURE_PYTHON") == "1", reason="the compiled decoder is turned off")


def test_the_compiled_decoder_is_built():
    # pip install (-e) . builds it where there is a C compiler, as on every machine the tests run on
    assert compiled._otlpc is not None, "otel_assay/collect/_otlpc.c was not compiled: reinstall the package"
    assert compiled.available()


def python_path(body: bytes, limits: Limits):
    """('error', message) or (tables, dedupe keys, rejected) from the Python path."""
    try:
        batch = SpanBatch(limits)
        add_protobuf(parse_protobuf(body), batch)
        tables = batch.tables()
    except MalformedOTLP as e:
        return ("error", str(e))
    tid, sid = batch.span_keys()
    return tables, [hash(t + s) for t, s in zip(tid, sid)], batch.rejected


def compiled_decoder(body: bytes, limits: Limits):
    try:
        fast = compiled.decode(body, limits)
    except MalformedOTLP as e:
        return ("error", str(e))
    if fast is None:
        return None
    return fast.tables(), fast.keys, fast.rejected


def assert_same(body: bytes, limits: Limits = DEFAULT_LIMITS) -> bool:
    """The compiled decoder's reading of ``body`` equals the Python path's; True if it read it."""
    fast = compiled_decoder(body, limits)
    if fast is None:
        return False
    slow = python_path(body, limits)
    if fast[0] == "error" or slow[0] == "error":
        assert fast == slow
        return True
    (ft, fkeys, frej), (st, skeys, srej) = fast, slow
    assert frej == srej == 0
    assert fkeys == skeys
    for name in ("spans", "span_events", "span_links"):
        a, b = ft[name], st[name]
        assert a.schema == b.schema, name
        assert a.num_rows == b.num_rows, name
        for col in b.schema.names:
            assert a.column(col).equals(b.column(col)), (name, col, a.column(col).to_pylist()[:5],
                                                         b.column(col).to_pylist()[:5])
    return True


# ----------------------------------------------------------------------------- generated requests
STRINGS = ["", "a", "chat", "gpt-4o", 'quote " and \\ backslash', "tab\tnew\nline\r", "\x00\x01\x1f\x7f",
           "héllo wörld", "日本語", "emoji 🤖", "\u2028\u2029", "x" * 300, "{\"json\": [1, 2]}", "None", "true"]
PROMOTED_KEYS = ["gen_ai.operation.name", "gen_ai.request.model", "gen_ai.usage.input_tokens", "assay.trial.score",
                 "assay.trial.index", "assay.scenario", "gen_ai.tool.call.id", "error.type", "gen_ai.provider.name"]
OTHER_KEYS = ["k", "", "gen_ai.response.finish_reasons", "llm.input_messages.0.message.content", "ключ", "a.b.c"]
INTS = [0, 1, -1, 2**31, -(2**31) - 1, 2**53 + 1, 2**63 - 1, -(2**63), 1234567890123]
DOUBLES = [0.0, -0.0, 1.5, 0.1, 1e16, 1e-7, 123456789.123, 2.0**60, -3.25, float("inf"), float("nan")]


def any_value(rng: random.Random, depth: int = 0, plain: bool = False) -> AnyValue:
    kinds = ["string", "int", "bool", "double", "empty", "array"] if plain else \
        ["string", "int", "bool", "double", "empty", "array", "kvlist", "bytes"]
    k = rng.choice(kinds if depth == 0 else kinds[:5] + (["array"] if not plain else []))
    if k == "string":
        return AnyValue(string_value=rng.choice(STRINGS))
    if k == "int":
        return AnyValue(int_value=rng.choice(INTS + [rng.randint(-10**6, 10**6)]))
    if k == "bool":
        return AnyValue(bool_value=rng.random() < 0.5)
    if k == "double":
        d = rng.choice(DOUBLES + [rng.uniform(-1e6, 1e6)])
        if plain and not math.isfinite(d):
            d = 2.5
        return AnyValue(double_value=d)
    if k == "empty":
        return AnyValue()
    if k == "array":
        return AnyValue(array_value=ArrayValue(values=[any_value(rng, depth + 1, plain) for _ in range(rng.randint(0, 4))]))
    if k == "kvlist":
        return AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="n", value=any_value(rng, depth + 1))]))
    return AnyValue(bytes_value=bytes(rng.randrange(256) for _ in range(rng.randint(0, 5))))


def attributes(rng: random.Random, plain: bool) -> list[KeyValue]:
    keys = rng.sample(PROMOTED_KEYS + OTHER_KEYS, rng.randint(0, 8)) + [f"attr.{i}" for i in range(rng.randint(0, 4))]
    if not plain and keys and rng.random() < 0.1:
        keys.append(keys[0])  # a repeated key
    out = []
    for key in keys:
        if key in ("gen_ai.usage.input_tokens", "assay.trial.index") and rng.random() < 0.7:
            value = AnyValue(int_value=rng.randint(0, 5000))  # mostly of the column's type
        elif key == "assay.trial.score" and rng.random() < 0.7:
            value = AnyValue(double_value=rng.random())
        elif key in PROMOTED_KEYS and rng.random() < 0.6:
            value = AnyValue(string_value=rng.choice(STRINGS[:10]))
        else:
            value = any_value(rng, plain=plain)
        out.append(KeyValue(key=key, value=value))
    return out


def request(rng: random.Random, plain: bool) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    for _ in range(rng.randint(1, 3)):
        rs = req.resource_spans.add()
        res = [KeyValue(key="service.name", value=AnyValue(string_value=rng.choice(["svc", "agent", ""])))] \
            if rng.random() < 0.8 else []
        rs.resource.attributes.extend(res + attributes(rng, True)[:3])
        for _ in range(rng.randint(0, 3)):
            ss = rs.scope_spans.add()
            if rng.random() < 0.8:
                ss.scope.name = rng.choice(["otel_assay", "openinference.instrumentation.langchain", ""])
                ss.scope.version = rng.choice(["", "1.2.3"])
            for _ in range(rng.randint(0, 6)):
                start = rng.randint(1, 2**62)
                span = ss.spans.add(
                    trace_id=rng.randbytes(16), span_id=rng.randbytes(8),
                    parent_span_id=rng.choice([b"", rng.randbytes(8), bytes(8)]),
                    name=rng.choice(STRINGS[:12]), kind=rng.randint(0, 5),
                    start_time_unix_nano=start, end_time_unix_nano=start + rng.randint(0, 10**9),
                    trace_state=rng.choice(["", "vendor=1"]),
                    dropped_attributes_count=rng.choice([0, 0, 3, 2**32 - 1]),
                    dropped_events_count=rng.choice([0, 1]), dropped_links_count=rng.choice([0, 2]))
                span.attributes.extend(attributes(rng, plain))
                span.status.code = rng.randint(0, 2)
                span.status.message = rng.choice(["", "boom", "ValueError('x')"])
                if rng.random() < 0.3:
                    for _ in range(rng.randint(1, 3)):
                        event = span.events.add(
                            time_unix_nano=rng.choice([start, 0, 2**63 - 1, 2**64 - 1, rng.randint(1, 2**62)]),
                            name=rng.choice(["exception", "gen_ai.content.prompt"] + STRINGS[:12]),
                            dropped_attributes_count=rng.choice([0, 0, 3, 2**32 - 1]))
                        event.attributes.extend(attributes(rng, plain))
                if rng.random() < 0.2:
                    for _ in range(rng.randint(1, 2)):
                        link = span.links.add(trace_id=rng.randbytes(16), span_id=rng.randbytes(8),
                                              trace_state=rng.choice(["", "vendor=1", "héllo"]),
                                              dropped_attributes_count=rng.choice([0, 5, 2**32 - 1]),
                                              flags=rng.choice([0, 1, 257]))
                        link.attributes.extend(attributes(rng, plain))
                if not plain:
                    r = rng.random()
                    if r < 0.1:
                        span.events.add(time_unix_nano=start, name="exception").attributes.extend(attributes(rng, True))
                    elif r < 0.15:  # a link to a malformed span context: dropped and counted
                        span.links.add(trace_id=rng.randbytes(rng.choice([0, 8, 16])), span_id=bytes(8))
                    elif r < 0.2:
                        span.trace_id = rng.randbytes(rng.choice([0, 8, 16]))  # sometimes invalid
                    elif r < 0.25:
                        span.end_time_unix_nano = start - 1
                    elif r < 0.3:
                        span.kind = rng.choice([6, -1])
    return req


def test_plain_requests_take_the_compiled_decoder_and_read_as_the_python_path_reads_them():
    rng = random.Random(20261123)
    for _ in range(400):
        body = request(rng, plain=True).SerializeToString()
        assert assert_same(body), "a plain request was left to the Python path"


def test_any_request_the_compiled_decoder_reads_reads_as_the_python_path_reads_it():
    rng = random.Random(7)
    read = 0
    for _ in range(600):
        read += assert_same(request(rng, plain=False).SerializeToString())
    assert 50 < read < 600  # both paths were taken


def test_small_limits_send_what_would_be_cut_or_dropped_to_the_python_path():
    rng = random.Random(11)
    limits = Limits(max_attributes=3, max_value_chars=20, max_key_chars=8)
    read = 0
    for _ in range(300):
        read += assert_same(request(rng, plain=True).SerializeToString(), limits)
    assert read > 10
    body = request(random.Random(1), plain=True).SerializeToString()
    assert assert_same(body, Limits(max_value_chars=0)) in (True, False)  # anything, but the same rows


def test_mutated_bytes_never_crash_and_what_is_read_is_what_the_python_path_reads():
    rng = random.Random(5)
    seeds = [request(rng, plain=True).SerializeToString() for _ in range(40)]
    seeds += [synthetic.request(3, rng=rng).SerializeToString() for _ in range(10)]
    read = 0
    for i in range(6000):
        b = bytearray(rng.choice(seeds))
        if not b:
            continue
        for _ in range(rng.randint(1, 4)):
            if not b:
                break
            op, at = rng.random(), rng.randrange(len(b))
            if op < 0.5:
                b[at] = rng.randrange(256)
            elif op < 0.7:
                b[at] ^= 1 << rng.randrange(8)
            elif op < 0.8:
                del b[at:at + rng.randint(1, 8)]
            elif op < 0.9:
                b[at:at] = rng.randbytes(rng.randint(1, 8))
            else:
                b = b[:at]
                if not b:
                    break
        read += assert_same(bytes(b))
    assert read > 300


# ----------------------------------------------------------------------------- declined requests
def _one_span(**kw) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    span = ss.spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="chat", kind=3,
                        start_time_unix_nano=10, end_time_unix_nano=20)
    for k, v in kw.items():
        if k == "attributes":
            span.attributes.extend(v)
        elif k == "event":
            span.events.add(time_unix_nano=15, name="exception").attributes.extend(v)
        elif k == "link":
            span.links.add(**v)
        else:
            setattr(span, k, v)
    return req


@pytest.mark.parametrize("case", [
    dict(event=[KeyValue(key="k", value=AnyValue(kvlist_value=KeyValueList()))]),
    dict(event=[KeyValue(key="k", value=AnyValue(string_value="a")), KeyValue(key="k", value=AnyValue(string_value="b"))]),
    dict(link=dict(trace_id=b"\x03" * 8, span_id=b"\x04" * 8)), dict(link=dict(trace_id=b"\x03" * 16, span_id=bytes(8))),
    dict(link=dict(trace_id=b"\x03" * 16, span_id=b"\x04" * 8, attributes=[
        KeyValue(key="k", value=AnyValue(bytes_value=b"x"))])),
    dict(trace_id=b"\x01" * 8), dict(trace_id=bytes(16)), dict(span_id=bytes(8)),
    dict(kind=7),
    dict(end_time_unix_nano=5), dict(start_time_unix_nano=0), dict(parent_span_id=b"\x01" * 5),
    dict(attributes=[KeyValue(key="k", value=AnyValue(kvlist_value=KeyValueList()))]),
    dict(attributes=[KeyValue(key="k", value=AnyValue(bytes_value=b"\x00"))]),
    dict(attributes=[KeyValue(key="k", value=AnyValue(double_value=float("nan")))]),
    dict(attributes=[KeyValue(key="k", value=AnyValue(array_value=ArrayValue(values=[
        AnyValue(array_value=ArrayValue())])))]),
    dict(attributes=[KeyValue(key="k", value=AnyValue(string_value="a")),
                     KeyValue(key="k", value=AnyValue(string_value="b"))]),
], ids=["event-kvlist", "event-repeated-key", "link-short-trace-id", "link-zero-span-id", "link-bytes-value",
        "short-trace-id", "zero-trace-id", "zero-span-id", "bad-kind", "ends-before-start", "no-start",
        "short-parent", "kvlist", "bytes", "nan", "nested-array", "repeated-key"])
def test_what_the_compiled_decoder_does_not_read_goes_to_the_python_path(case):
    body = _one_span(**case).SerializeToString()
    assert compiled.decode(body, DEFAULT_LIMITS) is None
    assert python_path(body, DEFAULT_LIMITS)[0] != "error"  # which reads (or rejects) it


@pytest.mark.parametrize("where", ["key", "value", "name", "array"])
def test_text_that_is_not_utf8_goes_to_the_python_path(where):
    def body(text: str) -> bytes:
        value = AnyValue(array_value=ArrayValue(values=[AnyValue(string_value=text)])) if where == "array" \
            else AnyValue(string_value=text if where == "value" else "v")
        kv = KeyValue(key=text if where == "key" else "k", value=value)
        return _one_span(attributes=[kv], **({"name": text} if where == "name" else {})).SerializeToString()

    # stray, cut short, surrogate, overlong, past U+10FFFF: each in place of as many ASCII bytes
    for bad in (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80"):
        placeholder = "~" * len(bad)
        assert compiled.decode(body(placeholder), DEFAULT_LIMITS) is not None
        assert compiled.decode(body(placeholder).replace(placeholder.encode(), bad), DEFAULT_LIMITS) is None, bad
    for good in ("é", "\ud7ff", "\ue000", "\U0010ffff", "\U00010000"):  # the edges that are valid
        assert assert_same(body(good))


def test_two_members_of_a_value_oneof_go_to_the_python_path():
    # protobuf keeps the last; the compiled decoder leaves such a value to it. The generated
    # classes never write two, so the bytes are put together by hand (lengths under 128)
    def field(tag: int, payload: bytes) -> bytes:
        assert len(payload) < 128
        return bytes([tag, len(payload)]) + payload

    value = AnyValue(string_value="first").SerializeToString() + AnyValue(int_value=5).SerializeToString()
    span = _one_span().resource_spans[0].scope_spans[0].spans[0].SerializeToString()
    span += field(0x4A, field(0x0A, b"k") + field(0x12, value))  # attributes: key k, the value
    body = field(0x0A, field(0x12, field(0x12, span)))  # resource_spans > scope_spans > spans
    assert compiled.decode(body, DEFAULT_LIMITS) is None
    assert python_path(body, DEFAULT_LIMITS)[0]["spans"].column("attributes").to_pylist() == [[("k", "5")]]


def test_values_are_stored_as_stringify_stores_them():
    arr = AnyValue(array_value=ArrayValue(values=[AnyValue(string_value='a"\\\n\x01é'), AnyValue(int_value=-3),
                                                  AnyValue(bool_value=True), AnyValue(double_value=1e16), AnyValue()]))
    body = _one_span(attributes=[
        KeyValue(key="s", value=arr), KeyValue(key="f", value=AnyValue(double_value=0.1)),
        KeyValue(key="i", value=AnyValue(int_value=-(2**63))), KeyValue(key="b", value=AnyValue(bool_value=False)),
        KeyValue(key="n", value=AnyValue()), KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(int_value=7)),
        KeyValue(key="gen_ai.usage.output_tokens", value=AnyValue(string_value="8")),
    ]).SerializeToString()
    assert assert_same(body)
    spans = compiled.decode(body, DEFAULT_LIMITS).tables()["spans"]
    assert dict(spans.column("attributes").to_pylist()[0]) == {
        "s": '["a\\"\\\\\\n\\u0001é",-3,true,1e+16,null]', "f": "0.1", "i": str(-(2**63)), "b": "false", "n": None,
        "gen_ai.usage.output_tokens": "8"}
    assert spans.column("input_tokens").to_pylist() == [7] and spans.column("output_tokens").to_pylist() == [None]


def test_the_receiver_stores_a_request_the_same_way_on_either_path(tmp_path, monkeypatch):
    """Spans with their events and links, and a retransmission of part of the request (whose
    spans, with their events and links, the receiver drops as duplicates) beside new spans."""
    import duckdb

    from otel_assay.collect.receiver import Collector

    first, second = _merged(random.Random(3), 6), _merged(random.Random(4), 6)
    second.resource_spans.append(first.resource_spans[0])  # already stored: dropped, events too
    out = {}
    for path in ("compiled", "python"):
        if path == "python":
            monkeypatch.setenv("OTEL_ASSAY_PURE_PYTHON", "1")
        c = Collector(tmp_path / path, flush_seconds=3600)
        try:
            accepted = [c.submit_protobuf(body.SerializeToString()).accepted for body in (first, second)]
            c.flush()
        finally:
            c.close()
        out[path] = [accepted] + [duckdb.sql(
            f"SELECT * EXCLUDE (dt) FROM read_parquet('{tmp_path / path}/{table}/**/*.parquet', hive_partitioning=true) "
            f"ORDER BY ALL").fetchall() for table in ("spans", "span_events", "span_links")]
    assert len(out["compiled"][2]) > 10 and len(out["compiled"][3]) > 2  # events and links were stored
    assert out["compiled"] == out["python"]


def _merged(rng: random.Random, n: int) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    for _ in range(n):
        req.resource_spans.extend(request(rng, plain=True).resource_spans)
    return req


def test_a_dropped_span_takes_its_events_and_links_with_it():
    body = _merged(random.Random(8), 20).SerializeToString()
    fast, slow = compiled.decode(body, DEFAULT_LIMITS), SpanBatch(DEFAULT_LIMITS)
    add_protobuf(parse_protobuf(body), slow)
    everything = fast.tables()
    span_ids = everything["spans"].column("span_id").to_pylist()
    # leave out every third span, and the spans of the first event and the first link
    dropped = {everything[t].column("span_id")[0].as_py() for t in ("span_events", "span_links")}
    keep = [i % 3 != 1 and sid not in dropped for i, sid in enumerate(span_ids)]
    a, b = fast.tables(keep), slow.tables(keep)
    for name in ("spans", "span_events", "span_links"):
        assert a[name].equals(b[name]), name
        assert 0 < a[name].num_rows < everything[name].num_rows, name


def _event_span(name: str = "exception", attrs=(), events: int = 1) -> bytes:
    req = _one_span()
    span = req.resource_spans[0].scope_spans[0].spans[0]
    for _ in range(events):
        span.events.add(time_unix_nano=15, name=name).attributes.extend(attrs)
    return req.SerializeToString()


def test_events_the_limits_would_cut_or_drop_go_to_the_python_path():
    limits = Limits(max_attributes=2, max_value_chars=10, max_events=2)
    two = [KeyValue(key="a", value=AnyValue(string_value="x")), KeyValue(key="b", value=AnyValue(int_value=1))]
    assert assert_same(_event_span("e" * 10, two, events=2), limits)
    for body in (_event_span(events=3),  # one event over max_events
                 _event_span(attrs=two + [KeyValue(key="c", value=AnyValue(bool_value=True))]),  # an attribute over
                 _event_span("e" * 11),  # a name over max_value_chars
                 _event_span(attrs=[KeyValue(key="k" * 1025, value=AnyValue(string_value="x"))])):  # a key over
        limits_here = limits if b"k" * 1025 not in body else DEFAULT_LIMITS
        assert compiled.decode(body, limits_here) is None
        assert python_path(body, limits_here)[0] != "error"


@pytest.mark.parametrize("where", ["name", "key", "value"])
def test_event_text_that_is_not_utf8_goes_to_the_python_path(where):
    def body(text: str) -> bytes:
        kv = KeyValue(key=text if where == "key" else "k", value=AnyValue(string_value=text if where == "value" else "v"))
        return _event_span(text if where == "name" else "exception", [kv])

    for bad in (b"\xff", b"\xed\xa0\x80", b"\xc0\xaf"):
        placeholder = "~" * len(bad)
        assert assert_same(body(placeholder))
        assert compiled.decode(body(placeholder).replace(placeholder.encode(), bad), DEFAULT_LIMITS) is None, bad


def test_odd_wire_bytes_are_declined_not_misread():
    base = _one_span().SerializeToString()
    # a ten-byte varint with bits past the 64th set; a tag of field 0; a group
    for body in (base + b"\x30" + b"\xff" * 9 + b"\x7f", b"\x00" + base, base + b"\x0b\x0c"):
        assert compiled.decode(body, DEFAULT_LIMITS) is None
    empty = compiled.decode(b"", DEFAULT_LIMITS)
    assert empty is not None and empty.tables()["spans"].num_rows == 0 == python_path(b"", DEFAULT_LIMITS)[0]["spans"].num_rows


def test_an_array_one_byte_over_the_limit_goes_to_the_python_path():
    limits = Limits(max_value_chars=8)
    fits = _one_span(attributes=[KeyValue(key="k", value=AnyValue(array_value=ArrayValue(values=[
        AnyValue(string_value="abcd")])))]).SerializeToString()  # ["abcd"]: 8 characters
    assert assert_same(fits, limits)
    over = _one_span(attributes=[KeyValue(key="k", value=AnyValue(array_value=ArrayValue(values=[
        AnyValue(string_value="abcde")])))]).SerializeToString()  # ["abcde"]: 9
    assert compiled.decode(over, limits) is None
    assert python_path(over, limits)[0]["spans"].column("attributes").to_pylist()[0][0][1].startswith('["abcde')


def test_a_value_with_a_field_this_code_does_not_know_goes_to_the_python_path():
    # AnyValue field 8 (string_value_strindex) is a member of the value oneof: after a string
    # it replaces it, and the Python path stores NULL
    def field(tag: int, payload: bytes) -> bytes:
        return bytes([tag, len(payload)]) + payload

    span = _one_span().resource_spans[0].scope_spans[0].spans[0].SerializeToString()
    for value in (field(0x0A, b"hello") + b"\x40\x05", AnyValue(int_value=7).SerializeToString() + b"\x40\x05",
                  field(0x2A, field(0x0A, field(0x0A, b"x") + b"\x40\x05"))):  # in an array element
        body = field(0x0A, field(0x12, field(0x12, span + field(0x4A, field(0x0A, b"k") + field(0x12, value)))))
        assert compiled.decode(body, DEFAULT_LIMITS) is None
        assert python_path(body, DEFAULT_LIMITS)[0] != "error"


def test_a_tag_longer_than_five_bytes_goes_to_the_python_path():
    # upb refuses it (the request is malformed); a five-byte tag is read by both
    span = _one_span().resource_spans[0].scope_spans[0].spans[0].SerializeToString()

    def field(tag: bytes, payload: bytes) -> bytes:
        return tag + bytes([len(payload)]) + payload

    # field 17 of the span, which neither path knows, its tag written in six and in five bytes
    for tag, read in ((b"\x8a\x81\x80\x80\x80\x00", False), (b"\x8a\x81\x80\x80\x00", True)):
        body = field(b"\x0a", field(b"\x12", field(b"\x12", span + field(tag, b"renamed"))))
        fast = compiled.decode(body, DEFAULT_LIMITS)
        assert (fast is not None) is read
        if read:
            assert assert_same(body)
        else:
            assert python_path(body, DEFAULT_LIMITS)[0] == "error"


def test_numbers_and_booleans_longer_than_a_tiny_limit_go_to_the_python_path():
    limits = Limits(max_value_chars=4)
    for value in (AnyValue(int_value=123456789), AnyValue(bool_value=False), AnyValue(double_value=0.125)):
        body = _one_span(attributes=[KeyValue(key="k", value=value)]).SerializeToString()
        assert compiled.decode(body, limits) is None
        assert python_path(body, limits)[0]["spans"].column("attributes").to_pylist()[0][0][1].endswith("[truncated by otel-assay]")
    assert assert_same(_one_span(attributes=[KeyValue(key="k", value=AnyValue(bool_value=True))]).SerializeToString(), limits)


def test_many_attributes_on_a_span_and_an_event_read_the_same_up_to_the_limit():
    # past 64 KeyValues the slices move from the stack to the heap, growing 4 times at a time
    def kvs(n: int) -> list[KeyValue]:
        return [KeyValue(key=f"k{i}", value=AnyValue(int_value=i)) for i in range(n)]

    for n in (63, 64, 65, 256, 257, 1024):
        req = _one_span(attributes=kvs(n))
        req.resource_spans[0].scope_spans[0].spans[0].events.add(time_unix_nano=15, name="e").attributes.extend(kvs(n))
        assert assert_same(req.SerializeToString()), n
    for span_n, event_n in ((1025, 1), (1, 1025)):
        req = _one_span(attributes=kvs(span_n))
        req.resource_spans[0].scope_spans[0].spans[0].events.add(time_unix_nano=15, name="e").attributes.extend(kvs(event_n))
        body = req.SerializeToString()
        assert compiled.decode(body, DEFAULT_LIMITS) is None  # the Python path drops what is over
        assert python_path(body, DEFAULT_LIMITS)[0] != "error"


def test_links_the_limits_would_drop_go_to_the_python_path():
    def body(links: int, attrs=()) -> bytes:
        req = _one_span()
        for i in range(links):
            req.resource_spans[0].scope_spans[0].spans[0].links.add(
                trace_id=bytes([i + 1]) * 16, span_id=b"\x04" * 8, trace_state="a=1").attributes.extend(attrs)
        return req.SerializeToString()

    limits = Limits(max_attributes=1, max_links=2)
    one = [KeyValue(key="a", value=AnyValue(string_value="x"))]
    assert assert_same(body(2, one), limits)
    for b in (body(3), body(1, one * 2 + [KeyValue(key="b", value=AnyValue(int_value=1))])):
        assert compiled.decode(b, limits) is None
        assert python_path(b, limits)[0] != "error"
