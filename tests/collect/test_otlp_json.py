"""OTLP/JSON value mapping details (the receiver and import share this code)."""

from __future__ import annotations

import base64

import pytest

from otel_assay.collect.otlp import MalformedOTLP, add_json, parse_json
from otel_assay.lake.rows import SpanBatch

TRACE = "5B8EFFF798038103D269B633813FC60C"  # upper case is allowed: OTLP/JSON ids are case-insensitive hex
SPAN = "EEE19B7EC3C1B174"


def doc(attrs, **span):
    s = {"traceId": TRACE, "spanId": SPAN, "name": "x", "kind": "SPAN_KIND_CLIENT",
         "startTimeUnixNano": "1544712660000000000", "endTimeUnixNano": 1544712661000000000,
         "attributes": attrs, "status": {"code": "STATUS_CODE_ERROR", "message": "boom"}}
    s.update(span)
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                               "scopeSpans": [{"scope": {"name": "sc", "version": "1"}, "spans": [s]}]}]}


def one_row(d):
    b = SpanBatch()
    assert add_json(d, b) == 1
    assert b.rejected == 0, b.reject_reasons
    return b.tables()["spans"].to_pylist()[0]


def test_values_ids_enums_and_promotion():
    row = one_row(doc([
        {"key": "s", "value": {"stringValue": "ü"}},
        {"key": "i", "value": {"intValue": "-42"}},
        {"key": "d", "value": {"doubleValue": 0.5}},
        {"key": "nan", "value": {"doubleValue": "NaN"}},
        {"key": "b", "value": {"boolValue": "false"}},
        {"key": "bytes", "value": {"bytesValue": base64.b64encode(b"\x00\x01").decode()}},
        {"key": "arr", "value": {"arrayValue": {"values": [{"intValue": 1}, {"stringValue": "a"}]}}},
        {"key": "kv", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": True}}]}}},
        {"key": "empty", "value": {}},
        {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "17"}},
        {"key": "gen_ai.request.model", "value": {"stringValue": "m"}},
        {"key": "assay.trial.score", "value": {"intValue": 1}},  # wrong type: stays in the map
    ]))
    assert row["trace_id"] == TRACE.lower() and row["span_id"] == SPAN.lower()
    assert row["kind"] == 3 and row["status_code"] == 2 and row["status_message"] == "boom"
    assert row["duration_ns"] == 1_000_000_000
    assert row["input_tokens"] == 17 and row["model"] == "m" and row["score"] is None
    assert dict(row["attributes"]) == {"s": "ü", "i": "-42", "d": "0.5", "nan": "nan", "b": "false",
                                       "bytes": "AAE=", "arr": '[1,"a"]', "kv": '{"k":true}', "empty": None,
                                       "assay.trial.score": "1"}
    assert row["service_name"] == "svc" and row["scope_name"] == "sc"


def test_base64_ids_from_protobufs_generic_json_mapping_are_recognised():
    t = base64.b64encode(bytes.fromhex(TRACE)).decode()
    s = base64.b64encode(bytes.fromhex(SPAN)).decode()
    row = one_row(doc([], traceId=t, spanId=s))
    assert row["trace_id"] == TRACE.lower() and row["span_id"] == SPAN.lower()


@pytest.mark.parametrize("bad", [
    {"attributes": "not a list"}, {"startTimeUnixNano": "soon"}, {"kind": "SPAN_KIND_BOGUS"},
    {"attributes": [{"key": "b", "value": {"boolValue": "maybe"}}]}, {"events": [{"timeUnixNano": []}]},
])
def test_malformed_span_is_rejected_not_fatal(bad):
    b = SpanBatch()
    d = doc([])
    d["resourceSpans"][0]["scopeSpans"][0]["spans"].append(doc([])["resourceSpans"][0]["scopeSpans"][0]["spans"][0] | bad
                                                           | {"spanId": "00000000000000ff"})
    assert add_json(d, b) == 2
    assert len(b) == 1 and b.rejected == 1


@pytest.mark.parametrize("body", [b"[", b"\xff", b"[" * 100_000 + b"]" * 100_000, b'"just a string"'])
def test_malformed_documents(body):
    with pytest.raises(MalformedOTLP):
        add_json(parse_json(body), SpanBatch())


def test_snake_case_field_names_are_accepted_at_any_level():
    snake = {"trace_id": TRACE, "span_id": SPAN, "name": "x", "kind": "SPAN_KIND_CLIENT",
             "start_time_unix_nano": "1544712660000000000", "end_time_unix_nano": "1544712661000000000",
             "attributes": [{"key": "gen_ai.request.model", "value": {"string_value": "m"}}],
             "status": {"code": "STATUS_CODE_ERROR", "message": "boom"}}
    camel_top = doc([])
    camel_top["resourceSpans"][0]["scopeSpans"][0]["spans"] = [snake]
    all_snake = {"resource_spans": [{"resource": {"attributes": [{"key": "service.name", "value": {"string_value": "svc"}}]},
                                     "scope_spans": [{"scope": {"name": "sc"}, "spans": [snake]}]}]}
    for d in (camel_top, all_snake):
        row = one_row(d)
        assert row["trace_id"] == TRACE.lower() and row["duration_ns"] == 1_000_000_000
        assert row["model"] == "m" and row["status_code"] == 2 and row["service_name"] == "svc"


@pytest.mark.parametrize("bad", [
    {"status": {"code": 2, "message": 5}}, {"traceState": 7},
    {"links": [{"traceId": TRACE, "spanId": SPAN, "traceState": ["x"]}]},
])
def test_a_number_where_a_string_belongs_rejects_that_span_not_the_batch(bad):
    # these failed in tables() (or mid-append), so the receiver dropped the connection with
    # a traceback and import crashed, losing every good span of the request or chunk
    b = SpanBatch()
    d = doc([])
    d["resourceSpans"][0]["scopeSpans"][0]["spans"].append(doc([])["resourceSpans"][0]["scopeSpans"][0]["spans"][0] | bad
                                                           | {"spanId": "00000000000000ff"})
    assert add_json(d, b) == 2
    assert b.tables()["spans"].num_rows == 1 and b.rejected == 1
    assert "must be a string" in next(iter(b.reject_reasons))


def test_a_non_string_scope_name_rejects_its_spans():
    d = doc([])
    d["resourceSpans"][0]["scopeSpans"][0]["scope"] = {"name": 5}
    b = SpanBatch()
    assert add_json(d, b) == 1
    assert b.tables()["spans"].num_rows == 0 and b.rejected == 1


def test_out_of_range_dropped_counts_are_clamped_into_the_int32_columns():
    row_doc = doc([], droppedAttributesCount=-1, droppedEventsCount=2**40,
                  events=[{"timeUnixNano": "1544712660000000000", "name": "e", "droppedAttributesCount": 2**40}],
                  links=[{"traceId": TRACE, "spanId": SPAN, "droppedAttributesCount": -2**40}])
    b = SpanBatch()
    add_json(row_doc, b)
    t = b.tables()
    row = t["spans"].to_pylist()[0]
    assert row["dropped_attributes_count"] == 0 and row["dropped_events_count"] == 2**31 - 1
    assert t["span_events"]["dropped_attributes_count"].to_pylist() == [2**31 - 1]
    assert t["span_links"]["dropped_attributes_count"].to_pylist() == [0]


def test_a_repeated_attribute_key_is_stored_once_and_the_lake_reads_in_python(tmp_path):
    # OTLP forbids repeated keys, but a payload can carry them (protobuf or JSON); a Parquet
    # map with a repeated key failed DuckDB's fetch to Python and read differently per reader
    import duckdb
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

    from otel_assay.lake.files import Lake
    from otel_assay.collect.otlp import add_protobuf, parse_protobuf

    b = SpanBatch()
    rep = [{"key": "k", "value": {"stringValue": "first"}}, {"key": "k", "value": {"intValue": 2}}]
    d = doc(rep, events=[{"timeUnixNano": "1544712660000000000", "name": "e", "attributes": rep}])
    d["resourceSpans"][0]["resource"]["attributes"] += rep
    add_json(d, b)
    req = pb.ExportTraceServiceRequest()
    s = req.resource_spans.add().scope_spans.add().spans.add(
        trace_id=bytes.fromhex(TRACE), span_id=b"\x01" * 8, name="p", start_time_unix_nano=1, end_time_unix_nano=2)
    s.attributes.add(key="k", value=AnyValue(string_value="first"))
    s.attributes.add(key="k", value=AnyValue(string_value="second"))
    add_protobuf(parse_protobuf(req.SerializeToString()), b)
    Lake(tmp_path).write(b.tables(), fsync=False)
    con = duckdb.connect()
    rows = con.sql(f"SELECT attributes, resource_attributes, dropped_attributes_count FROM "
                   f"read_parquet('{tmp_path}/spans/*/*.parquet') ORDER BY name").fetchall()
    assert rows == [({"k": "first"}, {}, 1), ({"k": "first"}, {"k": "first"}, 1)]
    ev = con.sql(f"SELECT attributes, dropped_attributes_count FROM read_parquet('{tmp_path}/span_events/*/*.parquet')")
    assert ev.fetchall() == [({"k": "first"}, 1)]


def test_keys_that_differ_only_in_lone_surrogates_are_one_key():
    # both are written as "?": seen apart, they made a map with a repeated key
    b = SpanBatch()
    add_json(doc([{"key": "\ud800", "value": {"stringValue": "a"}}, {"key": "\ud801", "value": {"stringValue": "b"}}]), b)
    assert b.tables()["spans"].column("attributes").to_pylist() == [[("?", "a")]]


def test_a_reject_reason_does_not_quote_a_huge_bad_value():
    # float() quotes the whole string: the reason went whole into partial success and into
    # the collector's per-reason counters, which it keeps for its lifetime
    b = SpanBatch()
    add_json(doc([{"key": "d", "value": {"doubleValue": "x" * 1_000_000}}]), b)
    assert b.rejected == 1 and max(len(r) for r in b.reject_reasons) < 1000


@pytest.mark.parametrize("bad, reason", [
    ({"kind": "SPAN_KIND_BOGUS"}, "kind 'SPAN_KIND_BOGUS' is none of SPAN_KIND_UNSPECIFIED, SPAN_KIND_INTERNAL, "
                                  "SPAN_KIND_SERVER, SPAN_KIND_CLIENT, SPAN_KIND_PRODUCER, SPAN_KIND_CONSUMER "
                                  "(nor their numbers 0-5)"),
    ({"status": {"code": "ERROR"}}, "status.code 'ERROR' is none of STATUS_CODE_UNSET, STATUS_CODE_OK, "
                                    "STATUS_CODE_ERROR (nor their numbers 0-2)"),
    ({"startTimeUnixNano": "soon"}, "startTimeUnixNano must be an integer or a decimal string, not 'soon'"),
])
def test_a_reject_reason_names_the_field_not_pythons_int(bad, reason):
    # the reason was int()'s "invalid literal for int() with base 10: 'SPAN_KIND_BOGUS'"
    d = doc([])
    d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(bad)
    b = SpanBatch()
    add_json(d, b)
    assert b.rejected == 1
    assert [r.split(": ", 1)[1] for r in b.reject_reasons] == [reason]


def test_null_strings_are_empty_not_the_text_none():
    row_doc = doc([{"key": "s", "value": {"stringValue": None}}, {"key": None, "value": {"intValue": 1}}],
                  name=None, events=[{"timeUnixNano": "1544712660000000000", "name": None}])
    b = SpanBatch()
    add_json(row_doc, b)
    t = b.tables()
    row = t["spans"].to_pylist()[0]
    assert row["name"] == "" and dict(row["attributes"]) == {"s": "", "": "1"}
    assert t["span_events"]["name"].to_pylist() == [""]


def test_a_link_to_a_malformed_span_context_is_dropped_and_counted():
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

    from otel_assay.collect.otlp import add_protobuf, parse_protobuf

    good = {"traceId": TRACE, "spanId": SPAN}
    bad = [{"traceId": TRACE[:-2], "spanId": SPAN}, {"traceId": TRACE, "spanId": "zz" + SPAN[2:]},
           {"traceId": "0" * 32, "spanId": SPAN}]
    b = SpanBatch()
    add_json(doc([], links=[good, *bad], droppedLinksCount=1), b)
    req = pb.ExportTraceServiceRequest()
    s = req.resource_spans.add().scope_spans.add().spans.add(
        trace_id=bytes.fromhex(TRACE), span_id=b"\x01" * 8, name="p", start_time_unix_nano=1, end_time_unix_nano=2)
    s.links.add(trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex(SPAN))
    s.links.add(trace_id=b"\x01" * 15, span_id=bytes.fromhex(SPAN))
    s.links.add(trace_id=bytes.fromhex(TRACE), span_id=b"\x00" * 8)
    add_protobuf(parse_protobuf(req.SerializeToString()), b)
    t = b.tables()
    assert b.rejected == 0 and t["spans"]["dropped_links_count"].to_pylist() == [4, 2]
    assert t["span_links"]["linked_span_id"].to_pylist() == [SPAN.lower()] * 2


@pytest.mark.parametrize("where", ["span", "resource"])
def test_a_double_past_the_range_of_a_double_is_a_bad_value_not_a_crash(where):
    # float() of the integer 10**400 raises OverflowError, which escaped add_json: import
    # ended with a traceback
    attrs = [{"key": "d", "value": {"doubleValue": 10**400}}]
    d = doc(attrs if where == "span" else [])
    if where == "resource":
        d["resourceSpans"][0]["resource"]["attributes"] += attrs
        with pytest.raises(MalformedOTLP, match="malformed resource"):
            add_json(d, SpanBatch())
        return
    b = SpanBatch()
    assert add_json(d, b) == 1 and b.rejected == 1 and len(b) == 0
    assert "int too large to convert to float" in next(iter(b.reject_reasons))
