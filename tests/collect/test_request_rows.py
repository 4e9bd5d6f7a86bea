"""A request's rows (spans, events and links) are bounded before they are decoded.

A body's size does not bound what it decodes to: an empty event is 2 bytes of protobuf and
a row in memory, and 20 MiB of them took the collector to 3.9 GB. The collector counts the
rows on the wire (the compiled decoder as it reads, ``_otlpc.count_rows`` before the Python
path parses) and refuses a request of more than ``max_request_rows`` with 413 /
RESOURCE_EXHAUSTED; buffered events and links count toward ``--max-buffered-spans``.
"""

from __future__ import annotations

import json
import random
import urllib.request

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

from otel_assay.collect import compiled
from otel_assay.collect.otlp import (MalformedOTLP, TooManyRows, add_json, json_rows, parse_protobuf,
                                     request_rows)
from otel_assay.collect.receiver import MIN_REQUEST_ROWS, Collector
from otel_assay.collect.server import Receiver
from otel_assay.lake.rows import SpanBatch
from otel_assay.lake.schema import DEFAULT_LIMITS

from .test_receiver import post

T0 = 1_700_000_000_000_000_000
needs_extension = pytest.mark.skipif(compiled._otlpc is None, reason="the compiled decoder is not built")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _unknown_fields(rng: random.Random) -> bytes:
    """Fields a newer sender might add, which upb keeps aside: a varint, a string, and a
    group holding what looks like an event (field 11, length-delimited) and a nested group.
    None of them is a row."""
    out = b""
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["varint", "len", "group"])
        num = rng.choice([50, 99, 1000, 536870911])
        if kind == "varint":
            out += _varint(num << 3) + _varint(rng.getrandbits(63))
        elif kind == "len":
            out += _varint(num << 3 | 2) + _varint(3) + b"abc"
        else:
            inner = _varint(11 << 3 | 2) + b"\x00" + _varint(7 << 3 | 3) + _varint(1 << 3) + b"\x01" + _varint(7 << 3 | 4)
            out += _varint(num << 3 | 3) + inner + _varint(num << 3 | 4)
    return out


def _request(spans: int = 1, events: int = 0, links: int = 0, *, rng: random.Random | None = None,
             bad_utf8: bool = False) -> bytes:
    """``spans`` spans of ``events`` empty events and ``links`` links each, spread over
    resources and scopes (with unknown fields at every level when ``rng`` is given)."""
    req = pb.ExportTraceServiceRequest()
    per_scope = max(1, spans // 3)
    made = 0
    while made < spans:
        rs = req.resource_spans.add()
        rs.resource.attributes.add(key="service.name").value.string_value = "rows"
        ss = rs.scope_spans.add()
        ss.scope.name = "rows"
        for _ in range(min(per_scope, spans - made)):
            made += 1
            s = ss.spans.add()
            s.trace_id = made.to_bytes(16, "big")
            s.span_id = made.to_bytes(8, "big")
            s.name = "step"
            s.start_time_unix_nano, s.end_time_unix_nano = T0, T0 + 1
            for _ in range(events):
                s.events.add()
            for i in range(links):
                s.links.add(trace_id=(i + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"))
            if rng is not None:
                s.ParseFromString(s.SerializeToString() + _unknown_fields(rng))
        if rng is not None:
            ss.ParseFromString(ss.SerializeToString() + _unknown_fields(rng))
            rs.ParseFromString(rs.SerializeToString() + _unknown_fields(rng))
    if bad_utf8:  # one span name that is not UTF-8: the compiled decoder leaves the request to the Python path
        req.resource_spans[0].scope_spans[0].spans[0].name = "st\u00e9p"
    body = req.SerializeToString()
    return body.replace("st\u00e9p".encode(), b"st\xff\xfep") if bad_utf8 else body  # as long


# ------------------------------------------------------------------ counting
@needs_extension
def test_count_rows_counts_what_the_python_path_parses():
    rng = random.Random(7)
    for _ in range(200):
        spans, events, links = rng.randint(0, 12), rng.randint(0, 5), rng.randint(0, 3)
        body = _request(spans, events, links, rng=rng)
        expected = spans * (1 + events + links)
        assert request_rows(parse_protobuf(body)) == expected
        assert compiled.count_rows(body) == expected


@needs_extension
def test_count_rows_is_none_for_bytes_that_are_no_message_and_upb_refuses_them_too():
    body = _request(3, 2, 1)
    for bad in (body[:-1], body + b"\x0a\x05ab",  # truncated: a field, a length past the end
                body + _varint(9 << 3 | 4),  # the end of a group that never started
                body + _varint(9 << 3 | 3) + b"\x08\x01",  # a group that never ends
                body + b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"):  # a tag longer than 10 bytes
        assert compiled.count_rows(bad) is None, bad[-12:]
        with pytest.raises(MalformedOTLP):
            parse_protobuf(bad)


@needs_extension
def test_on_mutated_bytes_count_rows_never_says_fewer_rows_than_upb_parses():
    """A count below what the Python path then parses would let a request past the limit."""
    rng = random.Random(11)
    compared = 0
    for _ in range(4000):
        body = bytearray(_request(rng.randint(1, 6), rng.randint(0, 3), rng.randint(0, 2),
                                  rng=rng if rng.random() < 0.5 else None))
        for _ in range(rng.randint(1, 4)):
            j = rng.randrange(len(body))
            op = rng.random()
            if op < 0.5:
                body[j] = rng.randrange(256)
            elif op < 0.75:
                del body[j]
            else:
                body.insert(j, rng.randrange(256))
        counted = compiled.count_rows(bytes(body))
        try:
            parsed = request_rows(parse_protobuf(bytes(body)))
        except MalformedOTLP:
            continue
        # None would leave the count until after upb had parsed it all
        assert counted is not None and counted >= parsed, bytes(body).hex()
        compared += 1
    assert compared > 300  # the mutations left enough requests readable to mean something


@needs_extension
def test_count_rows_reads_a_varint_as_upb_does():
    """upb takes a 10-byte varint whose last byte has bits past the 64th (and drops them); a
    count that gave up on one let upb parse 19 MiB of empty events before the limit applied."""
    body = _request(3, 2, 1)
    odd = _varint(50 << 3) + b"\xff" * 9 + b"\x7f"  # an unknown field 50 with such a value
    for where in (0, 1):
        req = pb.ExportTraceServiceRequest.FromString(body)
        if where:  # inside a span
            s = req.resource_spans[0].scope_spans[0].spans[0]
            s.ParseFromString(s.SerializeToString() + odd)
            data = req.SerializeToString()
        else:
            data = odd + body
        assert request_rows(parse_protobuf(data)) == 12
        assert compiled.count_rows(data) == 12


def _stored_rows(doc) -> int:
    batch = SpanBatch(DEFAULT_LIMITS)
    add_json(doc, batch)
    return sum(t.num_rows for t in batch.tables().values())


def _span_json(i: int, events: int, links: int, snake: bool = False) -> dict:
    ids = ("trace_id", "span_id", "start_time_unix_nano", "end_time_unix_nano") if snake else (
        "traceId", "spanId", "startTimeUnixNano", "endTimeUnixNano")
    span = dict(zip(ids, (f"{i + 1:032x}", f"{i + 1:016x}", str(T0), str(T0 + 1))))
    span["name"] = "step"
    span["events"] = [{"name": "e"}] * events
    span["links"] = [{"traceId": f"{9:032x}", "spanId": f"{9:016x}"}] * links
    return span


def test_json_rows_count_what_add_json_stores_whatever_the_spelling():
    """The keys json_rows reads are the ones add_json stores from: a count of other keys let
    6M events in under "events_" (which camels to "events") while "events" held none."""
    def spans(n, ev, ln, snake=False):
        return [_span_json(i, ev, ln, snake) for i in range(n)]

    docs = [
        {"resourceSpans": [{"scopeSpans": [{"spans": spans(2, 2, 1)}]}]},
        {"resource_spans": [{"scope_spans": [{"spans": spans(2, 3, 0, snake=True)}]}]},
        {"resourceSpans": [{"instrumentationLibrarySpans": [{"spans": spans(3, 1, 1)}]}]},
        # keys that camel to one name: the later wins, in the count as in the store
        {"resourceSpans": None, "resource_spans": [{"scopeSpans": [{"spans": spans(3, 1, 0)}]}]},
        {"resource_spans": [{"scope_spans": [], "scope_spans_": [{"spans": spans(3, 2, 0, snake=True)}]}]},
        {"resource_spans": [{"scope_spans": [{"spans": [], "spans_": spans(3, 1, 1, snake=True)}]}]},
        {"resourceSpans": [{"instrumentationLibrarySpans": [], "instrumentation_library_spans": [
            {"spans": spans(3, 0, 2, snake=True)}]}]},
        {"resourceSpans": [{"scopeSpans": [{"spans": [
            {**_span_json(0, 0, 0, snake=True), "events_": [{"name": "e"}] * 5}]}]}]},
    ]
    for doc in docs:
        stored = _stored_rows(doc)
        assert stored > 0 and json_rows(doc) == stored, doc
    # a span add_json rejects counts (one row, and its events and links when they are a list)
    rejected = {"resourceSpans": [{"scopeSpans": [{"spans": [7, {"events": "x"}, {"traceId": 5, "events": [{}] * 4}]}]}]}
    assert _stored_rows(rejected) == 0 and json_rows(rejected) == 7
    for bad in ([], {"resourceSpans": 5}, {"resourceSpans": [5]}, {"resourceSpans": [{"scopeSpans": {"spans": []}}]},
                {"resourceSpans": [{"scopeSpans": [{"spans": {"a": 1}}]}]}):
        with pytest.raises(MalformedOTLP):
            json_rows(bad)
        with pytest.raises(MalformedOTLP):
            _stored_rows(bad)


@needs_extension
def test_the_compiled_decoder_stops_past_max_rows():
    body = _request(4, 10, 2)  # 52 rows
    with pytest.raises(TooManyRows) as e:
        compiled.decode(body, DEFAULT_LIMITS, max_rows=51)
    assert "more than 51 spans, events and links" in str(e.value)
    batch = compiled.decode(body, DEFAULT_LIMITS, max_rows=52)
    tables = batch.tables()
    assert [tables[t].num_rows for t in ("spans", "span_events", "span_links")] == [4, 40, 8]


# ------------------------------------------------------------------ the collector
@pytest.fixture
def small_collector(tmp_path):
    """A collector in this process that takes MIN_REQUEST_ROWS rows a request (and buffers
    1,000 rows), over HTTP and gRPC on 127.0.0.1."""
    collector = Collector(tmp_path / "lake", max_buffered_spans=1000, flush_seconds=30)
    receiver = Receiver(collector, grpc_addr=("127.0.0.1", 0), http_addr=("127.0.0.1", 0))
    receiver.start()
    ports = {listener.protocol: listener.port for listener in receiver.listeners}
    try:
        yield collector, f"http://127.0.0.1:{ports['http']}/v1/traces", f"127.0.0.1:{ports['grpc']}"
    finally:
        receiver.stop()


def _stored(collector) -> dict[str, int]:
    collector.flush()
    from otel_assay.analyze.engine import Engine
    with Engine(collector.lake.root) as eng:
        return {t: eng.rows(f"SELECT count(*) FROM {t}")[0][0] for t in ("spans", "span_events")}


def test_a_request_of_too_many_rows_is_refused_on_every_path_and_nothing_of_it_is_stored(small_collector):
    collector, url, grpc_target = small_collector
    assert collector.max_request_rows == MIN_REQUEST_ROWS == 100_000
    over = _request(100, 1000)  # 100,000 events and 100 spans: 100 rows too many, 0.2 MiB of protobuf
    refusals = 0
    for body, ctype in ((over, "application/x-protobuf"),  # the compiled decoder stops reading
                        (_request(100, 1000, bad_utf8=True), "application/x-protobuf"),  # counted, then parsed
                        (json.dumps(_json(100, 1000)).encode(), "application/json")):  # counted once parsed
        status, _headers, resp = post(url, body, ctype)
        refusals += 1
        assert status == 413, resp[:200]
        text = resp.decode("utf-8", "replace")
        assert "100,100 spans, events and links" in text or "more than 100,000 spans, events and links" in text
        assert "send smaller batches" in text
    channel = grpc.insecure_channel(grpc_target)
    raw = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
    with pytest.raises(grpc.RpcError) as e:
        raw(over, timeout=30)
    refusals += 1
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # not retried: the same batch would fail again
    assert "send smaller batches" in e.value.details()
    assert collector.stats.too_many_rows == refusals and collector.stats.requests == 0
    assert collector.buffered_rows == 0
    # at the limit it is stored, events and all
    at = _request(100, 999)  # 99,900 events and 100 spans
    assert post(url, at)[0] == 200
    assert _stored(collector) == {"spans": 100, "span_events": 99_900}


def _json(spans: int, events: int) -> dict:
    return {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "step", "startTimeUnixNano": str(T0),
         "endTimeUnixNano": str(T0 + 1), "events": [{}] * events} for i in range(spans)]}]}]}


def test_without_the_extension_the_rows_are_counted_once_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "_otlpc", None)
    collector = Collector(tmp_path / "lake", max_buffered_spans=1000, flush_seconds=30)
    try:
        with pytest.raises(TooManyRows, match="holds 100,100 spans, events and links"):
            collector.submit_protobuf(_request(100, 1000))
        assert collector.submit_protobuf(_request(2, 3)).accepted == 2
    finally:
        collector.close()


def test_buffered_events_and_links_count_toward_the_buffer_bound_and_spans_written_counts_spans(small_collector):
    collector, url, _ = small_collector
    with collector._flush_lock:  # the Parquet writer is busy (a slow disk)
        assert post(url, _request(2, 500, 100))[0] == 200  # 2 spans, 1,202 rows
        assert collector.buffered_rows == 1202
        with urllib.request.urlopen(url.replace("/v1/traces", "/health"), timeout=10) as r:
            health = json.loads(r.read())
        assert health["status"] == "ok" and health["buffered_rows"] == 1202 and health["unwritten_spans"] == 0
        status, headers, resp = post(url, _request(1))
        assert status == 503 and int(headers["Retry-After"]) >= 1
        assert b"1202 spans, events and links waiting to be written" in resp
    collector.flush()  # (or the flusher, woken by the buffer past half full, was first)
    assert collector.stats.spans_written == 2 and collector.buffered_rows == 0  # spans, not rows
    assert post(url, _request(1))[0] == 200
