"""The receiver's fast path (the compiled decoder, ``_otlpc``) against its simple path (the
generated OTLP classes into the row builder), on the same bytes.

The compiled decoder may decline a request (the simple path then reads it), but whatever it
reads must give exactly the simple path's tables: the same rows, byte for byte. Requests
are generated (hypothesis) with spans of every kind of attribute value, events, links,
repeated keys, bad ids and times, under small and default limits; plain ones must take the
compiled decoder, so the comparison cannot pass by the decoder declining everything.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from otel_assay import semconv
from otel_assay.collect import compiled, synthetic
from otel_assay.collect.otlp import MalformedOTLP, add_protobuf, parse_protobuf, request_rows
from otel_assay.lake.rows import SpanBatch
from otel_assay.lake.schema import DEFAULT_LIMITS, Limits

pytestmark = pytest.mark.skipif(compiled.pure_python(), reason="the compiled decoder is turned off")

T0 = 1_700_000_000_000_000_000


def test_the_compiled_decoder_is_built():
    # pip install (-e) . builds it where there is a C compiler, as on every machine the tests run on
    assert compiled._otlpc is not None, "otel_assay/collect/_otlpc.c was not compiled: reinstall the package"
    assert compiled.available()


@pytest.mark.parametrize("value, pure", [("1", True), ("true", True), ("TRUE", True), ("yes", True), ("Yes", True),
                                         ("on", True), (" on ", True), ("0", False), ("false", False), ("no", False),
                                         ("", False)])
def test_otel_assay_pure_python_takes_every_usual_truthy_spelling(monkeypatch, value, pure):
    monkeypatch.setenv("OTEL_ASSAY_PURE_PYTHON", value)
    assert compiled.pure_python() is pure
    body = synthetic.request(2, rng=random.Random(1)).SerializeToString()
    batch, received = compiled.protobuf_batch(body, DEFAULT_LIMITS, 10**6)
    assert received == 20 and len(batch) == 20
    assert isinstance(batch, SpanBatch) is pure


# ----------------------------------------------------------------------------- requests
_KEYS = [k for _c, k, _t in semconv.PROMOTED_SPAN_ATTRIBUTES] + ["a", "b", "k" * 40, "é"]
_text = st.one_of(st.text(max_size=12), st.text(alphabet="aé日", min_size=30, max_size=80))
_scalar = st.one_of(
    _text.map(lambda s: AnyValue(string_value=s)),
    st.integers(-2**63, 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
    st.booleans().map(lambda b: AnyValue(bool_value=b)),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: AnyValue(double_value=x)),
    st.binary(max_size=8).map(lambda b: AnyValue(bytes_value=b)),
    st.just(AnyValue()),
)
_value = st.one_of(
    _scalar,
    st.lists(_scalar, max_size=3).map(lambda vs: AnyValue(array_value=ArrayValue(values=vs))),
    st.lists(st.tuples(st.sampled_from(_KEYS), _scalar), max_size=2).map(
        lambda kvs: AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in kvs]))),
)
# what the compiled decoder reads itself: one of these per key (promoted keys of another type too)
_plain_value = st.one_of(
    st.text(alphabet="xyzé日", max_size=8).map(lambda s: AnyValue(string_value=s)),
    st.integers(-2**63, 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
    st.booleans().map(lambda b: AnyValue(bool_value=b)),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: AnyValue(double_value=x)),
)
_attributes = st.lists(st.tuples(st.one_of(st.sampled_from(_KEYS), st.text(max_size=6)), _value), max_size=5)
_ids16 = st.one_of(st.sampled_from([bytes([i]) * 16 for i in range(1, 4)]), st.sampled_from([b"", bytes(16), b"\x01" * 15]))
_ids8 = st.one_of(st.binary(min_size=8, max_size=8), st.sampled_from([b"", bytes(8), b"\x01" * 7]))
_time = st.one_of(st.integers(T0, T0 + 10**9), st.sampled_from([0, 2**63 - 1, 2**63, 2**64 - 1]))


def _kvs(pairs) -> list[KeyValue]:
    return [KeyValue(key=k, value=v) for k, v in pairs]


@st.composite
def _span(draw, plain: bool):
    ids16 = st.sampled_from([bytes([i]) * 16 for i in range(1, 4)]) if plain else _ids16
    ids8 = st.binary(min_size=7, max_size=7).map(lambda b: b"\x01" + b) if plain else _ids8
    start = draw(st.integers(T0, T0 + 10**9) if plain else _time)
    span = dict(trace_id=draw(ids16), span_id=draw(ids8), parent_span_id=draw(st.one_of(st.just(b""), ids8)),
                name=draw(st.text(alphabet="abc", max_size=10) if plain else _text),
                kind=draw(st.integers(0, 5 if plain else 7)),
                start_time_unix_nano=start,
                end_time_unix_nano=min(start + draw(st.integers(0, 10**6)), 2**64 - 1) if plain or draw(st.booleans())
                else draw(_time),
                trace_state=draw(st.sampled_from(["", "a=b"])),
                dropped_attributes_count=draw(st.sampled_from([0, 3, 2**32 - 1])),
                dropped_events_count=draw(st.sampled_from([0, 2])),
                dropped_links_count=draw(st.sampled_from([0, 1])))
    attributes = st.lists(st.tuples(st.sampled_from(_KEYS), _plain_value), max_size=4,
                          unique_by=lambda kv: kv[0]) if plain else _attributes
    events = [dict(time_unix_nano=draw(st.integers(T0, T0 + 10**9)), name=draw(st.text(alphabet="e", max_size=3)),
                   attributes=_kvs(draw(attributes)),
                   dropped_attributes_count=0 if plain else draw(st.sampled_from([0, 1])))
              for _ in range(draw(st.integers(0, 2 if plain else 3)))]
    links = [dict(trace_id=draw(ids16), span_id=draw(ids8), trace_state=draw(st.sampled_from(["", "x=y"])),
                  attributes=_kvs(draw(attributes)), dropped_attributes_count=0 if plain else draw(st.sampled_from([0, 4])))
             for _ in range(draw(st.integers(0, 2 if plain else 3)))]
    status = dict(code=draw(st.integers(0, 2 if plain else 4)), message=draw(st.sampled_from(["", "boom", "x" * 40])))
    return span, _kvs(draw(attributes)), events, links, status


@st.composite
def requests(draw, plain: bool = False) -> bytes:
    req = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(1, 2))):
        rs = req.resource_spans.add()
        rs.resource.attributes.extend(_kvs(draw(st.lists(st.tuples(
            st.sampled_from(["service.name", "host", "service.name"]), st.text(alphabet="sv", max_size=5).map(
                lambda s: AnyValue(string_value=s))), max_size=3))))
        for _ in range(draw(st.integers(1, 2))):
            ss = rs.scope_spans.add()
            ss.scope.name, ss.scope.version = draw(st.sampled_from([("", ""), ("agent", "1.0")]))
            for span_fields, attributes, events, links, status in draw(st.lists(_span(plain), max_size=4)):
                s = ss.spans.add(**span_fields)
                s.attributes.extend(attributes)
                for e in events:
                    s.events.add(**e)
                for link in links:
                    s.links.add(**link)
                s.status.code, s.status.message = status["code"], status["message"]
    return req.SerializeToString()


_limits = st.builds(Limits, max_attributes=st.sampled_from([1, 3, 1024]), max_value_chars=st.sampled_from([4, 40, 1 << 18]),
                    max_key_chars=st.sampled_from([3, 1024]), max_events=st.sampled_from([1, 1024]),
                    max_links=st.sampled_from([1, 1024]))


# ----------------------------------------------------------------------------- the paths
def simple_path(body: bytes, limits: Limits):
    batch = SpanBatch(limits)
    add_protobuf(parse_protobuf(body), batch)
    tid, sid = batch.span_keys()
    return batch.tables(), [hash(t + s) for t, s in zip(tid, sid)], batch.rejected


def assert_same_tables(fast: dict, slow: dict) -> None:
    assert fast.keys() == slow.keys()
    for name in slow:
        assert fast[name].num_rows == slow[name].num_rows, name
        assert fast[name].schema == slow[name].schema, name
        if not fast[name].equals(slow[name]):
            for col in slow[name].column_names:  # which column, for the report
                a, b = fast[name].column(col).to_pylist(), slow[name].column(col).to_pylist()
                same = all(x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))
                assert same, (name, col, a, b)
            assert fast[name].equals(slow[name]), name


def compare(body: bytes, limits: Limits) -> bool:
    """The compiled decoder's reading of ``body`` equals the simple path's; True if it read it."""
    fast = compiled.decode(body, limits)
    parsed = parse_protobuf(body)
    if not parsed.rejected:  # (spans left out for their text are not in the parsed request)
        assert compiled.count_rows(body) == request_rows(parsed)
    if fast is None:
        return False
    tables, keys, rejected = simple_path(body, limits)
    assert rejected == fast.rejected == 0
    assert keys == fast.keys and len(fast) == tables["spans"].num_rows
    assert_same_tables(fast.tables(), tables)
    # the receiver leaves duplicates out by row: both paths leave a span's events and links with it
    keep = [i % 2 == 0 for i in range(len(fast))]
    assert_same_tables(fast.tables(keep), simple_path_keep(body, limits, keep))
    return True


def simple_path_keep(body: bytes, limits: Limits, keep: list[bool]) -> dict:
    batch = SpanBatch(limits)
    add_protobuf(parse_protobuf(body), batch)
    return batch.tables(keep)


_fuzz = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_fuzz
@given(st.booleans().flatmap(requests), _limits)
def test_whatever_the_compiled_decoder_reads_gives_the_simple_paths_tables(body, limits):
    event("read by the compiled decoder" if compare(body, limits) else "declined")


@_fuzz
@given(requests(plain=True))
def test_plain_requests_take_the_compiled_decoder_and_give_the_simple_paths_tables(body):
    assert compare(body, DEFAULT_LIMITS), "the compiled decoder declined a plain request"


def test_synthetic_agent_traces_take_the_compiled_decoder():
    """The benchmark's requests (agent traces, an exception event on some spans)."""
    for seed in range(5):
        body = synthetic.request(20, rng=random.Random(seed)).SerializeToString()
        assert compare(body, DEFAULT_LIMITS)


def test_mutated_bytes_never_crash_and_what_is_read_is_what_the_simple_path_reads():
    rng = random.Random(5)
    read = 0
    for _ in range(1500):
        body = bytearray(synthetic.request(2, rng=rng).SerializeToString())
        for _ in range(rng.randint(1, 3)):
            j = rng.randrange(len(body))
            body[j] = rng.randrange(256)
        try:
            parse_protobuf(bytes(body))
        except MalformedOTLP:
            try:  # the compiled decoder does not read what protobuf refuses
                assert compiled.decode(bytes(body), DEFAULT_LIMITS) is None
            except MalformedOTLP:
                pass
            continue
        read += compare(bytes(body), DEFAULT_LIMITS)
    assert read > 100  # most single-byte changes land in text or numbers the decoder still reads
