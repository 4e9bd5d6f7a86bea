"""OTLP/JSON value mapping details (the receiver and import share this code)."""

from __future__ import annotations

import base64

import pytest

from otel_assay.collect.otlp import MalformedOTLP, add_json, parse_json
from otel_assay.collect.schema import SpanBatch

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
