"""OTLP trace data (protobuf and JSON) into lake rows.

JSON is mapped straight to rows, not through ``google.protobuf.json_format``: OTLP/JSON
ids are hex, and the generic protobuf JSON parser would read a 32-digit hex trace id as
base64 and silently produce a 24-byte garbage id.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from typing import Any, NamedTuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ..lake.rows import SpanBatch, make_resource


class MalformedOTLP(ValueError):
    """The whole payload is unusable (HTTP 400 / gRPC INVALID_ARGUMENT); message says why."""


class TooManyRows(Exception):
    """The payload holds more spans, events and links than the receiver decodes in one
    request (HTTP 413 / gRPC RESOURCE_EXHAUSTED: smaller batches get in)."""

    def __init__(self, rows: int, limit: int, exact: bool = True):
        self.rows, self.limit = rows, limit
        held = f"{rows:,}" if exact else f"more than {limit:,}"
        super().__init__(f"the request holds {held} spans, events and links; the collector decodes at most "
                         f"{limit:,} in one request (the larger of --max-buffered-spans and 100,000): "
                         "send smaller batches")


# --------------------------------------------------------------------------- protobuf
_SCALAR_FIELDS = frozenset({"string_value", "int_value", "bool_value", "double_value", "bytes_value"})


def pb_value(v) -> Any:
    """An AnyValue as the Python value the row builder stores (None when it is empty)."""
    which = v.WhichOneof("value")
    if which == "array_value":
        return [pb_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: pb_value(kv.value) for kv in v.kvlist_value.values}
    # not string_value_strindex: an index into a profile's string table, no value of a span
    return getattr(v, which) if which in _SCALAR_FIELDS else None


def pb_attributes(kvs) -> list[tuple[str, Any]]:
    return [(kv.key, pb_value(kv.value)) for kv in kvs]


class Parsed(NamedTuple):
    """A parsed request, and why each span left out of it (its text is not UTF-8) was."""

    request: ExportTraceServiceRequest
    rejected: list[str]


def parse_protobuf(body: bytes) -> Parsed:
    """Parse an ExportTraceServiceRequest (TracesData has the same wire format).

    protobuf refuses a whole message for one string that is not UTF-8; such a string costs
    only its span here (see :func:`_salvage`). Raises :class:`MalformedOTLP` for bytes that
    are no such message.
    """
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(body)
    except Exception as e:  # protobuf raises DecodeError, or RuntimeError on deep nesting
        salvaged = _salvage(body)
        if salvaged is None:
            raise MalformedOTLP(f"not a valid OTLP protobuf ExportTraceServiceRequest: {e}") from None
        return salvaged
    return Parsed(req, [])


_NOT_UTF8 = " is not valid UTF-8 (protobuf strings must be)"


@functools.cache
def _lenient_request() -> type:
    """ExportTraceServiceRequest with every string field declared ``bytes``: the same wire
    format, parsed without the UTF-8 check, so that the spans whose text fails it can be
    found and left out. Built from the generated descriptors on first use (a request with
    such text is rare)."""
    pool = descriptor_pool.DescriptorPool()
    prefix = "otel_assay.lenient."

    def rename(messages) -> None:
        for m in messages:
            for f in m.field:
                if f.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
                    f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                if f.type_name.startswith("."):
                    f.type_name = "." + prefix + f.type_name[1:]
            rename(m.nested_type)

    for module in (common_pb2, resource_pb2, trace_pb2, trace_service_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fdp)
        fdp.name = "otel_assay_lenient/" + fdp.name
        fdp.package = prefix + fdp.package
        fdp.dependency[:] = ["otel_assay_lenient/" + d for d in fdp.dependency]
        fdp.ClearField("service")
        rename(fdp.message_type)
        pool.Add(fdp)
    name = prefix + ExportTraceServiceRequest.DESCRIPTOR.full_name
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _strict(cls, lenient_message) -> bool:
    """Whether ``lenient_message`` parses as ``cls`` (so all of its text is UTF-8)."""
    try:
        cls.FromString(lenient_message.SerializeToString())
    except Exception:
        return False
    return True


def _span_text_error(span) -> str | None:
    for what, text in (("span name", span.name), ("trace_state", span.trace_state),
                       ("status message", span.status.message)):
        if not _utf8(text):
            return what + _NOT_UTF8
    if not all(_utf8(e.name) for e in span.events):
        return "event name" + _NOT_UTF8
    if not all(_utf8(l.trace_state) for l in span.links):
        return "link trace_state" + _NOT_UTF8
    if not _strict(trace_pb2.Span, span):
        return "attribute key or string value" + _NOT_UTF8
    return None


def _salvage(body: bytes) -> Parsed | None:
    """A body protobuf refused, as a request of its spans whose text is UTF-8 and the reason
    for each span left out; None when the body is malformed otherwise.

    Such a span is rejected rather than its bytes replaced: a name the agent never had
    would be stored, and counted under. Text the lake does not store (scope attributes,
    schema URLs) is cleared instead; resource attributes that are not UTF-8 leave every
    span without its resource, so the request is malformed. Only called once the strict
    parse has failed: valid requests pay nothing for it.
    """
    lenient = _lenient_request()()
    try:
        lenient.ParseFromString(body)
    except Exception:  # DecodeError, or RuntimeError on deep nesting
        return None
    reasons: list[str] = []
    for rs in lenient.resource_spans:
        if not _strict(resource_pb2.Resource, rs.resource):
            raise MalformedOTLP("malformed resource attributes: attribute key or string value" + _NOT_UTF8)
        if not _utf8(rs.schema_url):
            rs.ClearField("schema_url")
        bad_scopes = []
        for j, ss in enumerate(rs.scope_spans):
            if not _utf8(ss.schema_url):
                ss.ClearField("schema_url")
            if not (_utf8(ss.scope.name) and _utf8(ss.scope.version)):
                reasons += ["instrumentation scope name or version" + _NOT_UTF8] * len(ss.spans)
                bad_scopes.append(j)
                continue
            if not _strict(common_pb2.InstrumentationScope, ss.scope):
                del ss.scope.attributes[:]
            bad = [(i, why) for i, span in enumerate(ss.spans) if (why := _span_text_error(span))]
            for i, why in reversed(bad):
                reasons.append(why)
                del ss.spans[i]
        for j in reversed(bad_scopes):
            del rs.scope_spans[j]
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(lenient.SerializeToString())
    except Exception:
        return None
    return Parsed(req, reasons)


def add_protobuf(parsed: Parsed, batch: SpanBatch) -> int:
    """Append every span of a parsed request to ``batch``; return the number of spans seen
    (those left out for their text included, as rejected)."""
    for why in parsed.rejected:
        batch.reject(why)
    seen = len(parsed.rejected)
    for rs in parsed.request.resource_spans:
        resource = make_resource(pb_attributes(rs.resource.attributes), batch.limits)
        for ss in rs.scope_spans:
            scope = ss.scope
            seen += len(ss.spans)
            for span in ss.spans:
                status = span.status
                batch.add_span(
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    name=span.name,
                    kind=span.kind,
                    start_time_unix_nano=span.start_time_unix_nano,
                    end_time_unix_nano=span.end_time_unix_nano,
                    status_code=status.code,
                    status_message=status.message,
                    trace_state=span.trace_state,
                    scope_name=scope.name,
                    scope_version=scope.version,
                    resource=resource,
                    attributes=pb_attributes(span.attributes),
                    events=[(e.time_unix_nano, e.name, pb_attributes(e.attributes), e.dropped_attributes_count)
                            for e in span.events],
                    links=[(l.trace_id.hex(), l.span_id.hex(), l.trace_state, pb_attributes(l.attributes),
                            l.dropped_attributes_count) for l in span.links],
                    dropped_attributes_count=span.dropped_attributes_count,
                    dropped_events_count=span.dropped_events_count,
                    dropped_links_count=span.dropped_links_count,
                )
    return seen


def request_rows(parsed: Parsed) -> int:
    """The spans, events and links of a parsed request (what it will decode to)."""
    return sum(len(ss.spans) + sum(len(s.events) + len(s.links) for s in ss.spans)
               for rs in parsed.request.resource_spans for ss in rs.scope_spans)


# --------------------------------------------------------------------------- JSON
_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3, "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5,
}
_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def _json_int(v: Any, what: str) -> int:
    if isinstance(v, bool):
        raise ValueError(f"{what} must be an integer, got a boolean")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            # int()'s own message ("invalid literal for int() with base 10") names Python,
            # not the field; the value is quoted short, as reject reasons are kept and counted
            raise ValueError(f"{what} must be an integer or a decimal string, not {v[:40]!r}") from None
    if isinstance(v, float) and v.is_integer():
        return int(v)
    raise ValueError(f"{what} must be an integer or a decimal string")


def _json_enum(v: Any, names: dict[str, int], what: str) -> int:
    if v is None:
        return 0
    if isinstance(v, str) and v in names:  # MessageToDict writes enum names
        return names[v]
    try:
        return _json_int(v, what)
    except ValueError:
        raise ValueError(f"{what} {str(v)[:40]!r} is none of {', '.join(names)} "
                         f"(nor their numbers 0-{max(names.values())})") from None


def _json_id(v: Any, nbytes: int) -> str:
    """Hex as the OTLP/JSON spec says; base64 (protobuf's generic JSON mapping) by length."""
    if not v:
        return ""
    if not isinstance(v, str):
        raise ValueError("ids must be strings")
    b64len = 4 * ((nbytes + 2) // 3)
    if len(v) == b64len and len(v) != 2 * nbytes:
        try:
            raw = base64.b64decode(v, validate=True)
        except binascii.Error:
            return v
        if len(raw) == nbytes:
            return raw.hex()
    return v


def _json_str(v: Any) -> str:
    # null is the field's default in proto3 JSON: "", not the text "None"
    return "" if v is None else str(v)


def _json_value(v: Any) -> Any:
    if not isinstance(v, dict) or not v:
        return None
    if "stringValue" in v:
        return _json_str(v["stringValue"])
    if "intValue" in v:
        return _json_int(v["intValue"], "intValue")
    if "boolValue" in v:
        b = v["boolValue"]
        if isinstance(b, str):  # lenient producers quote booleans
            if b.lower() not in ("true", "false"):
                raise ValueError(f"boolValue {b!r} is not a boolean")
            return b.lower() == "true"
        return bool(b)
    if "doubleValue" in v:
        return float(v["doubleValue"])  # also accepts "NaN", "Infinity" as proto3 JSON writes them
    if "arrayValue" in v:
        return [_json_value(x) for x in (v["arrayValue"] or {}).get("values", []) or []]
    if "kvlistValue" in v:
        return {_json_str(kv.get("key")): _json_value(kv.get("value")) for kv in (v["kvlistValue"] or {}).get("values", []) or []}
    if "bytesValue" in v:
        return base64.b64decode(v["bytesValue"])
    return None


def _json_attrs(kvs: Any) -> list[tuple[str, Any]]:
    if not kvs:
        return []
    if not isinstance(kvs, list):
        raise ValueError("attributes must be a list of {key, value}")
    return [(_json_key(kv.get("key")), _json_value(kv.get("value"))) for kv in kvs]


def _json_key(k: Any) -> str:
    k = _json_str(k)
    # JSON can carry lone surrogates ("\ud800"), which the writer replaces by "?": done here
    # instead, so that two such keys are seen as the same key before the map is built
    return k if k.isascii() else k.encode("utf-8", "replace").decode("utf-8")


@functools.lru_cache(maxsize=1024)  # field names are few; odd keys must not grow it
def _camel_key(k: str) -> str:
    head, *rest = k.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _camel(v: Any) -> Any:
    """``v`` with the proto field names (``trace_id``) as the lowerCamelCase JSON names.

    The OTLP/JSON spec requires lowerCamelCase, but proto3's JSON mapping accepts both, and
    ``MessageToDict(..., preserving_proto_field_name=True)`` and some exporters write
    snake_case. Every dict key in OTLP/JSON is a field name (attribute keys are values of
    ``key``), so renaming all of them is safe. Only documents that use snake_case pay for it.
    """
    if isinstance(v, dict):
        return {(_camel_key(k) if "_" in k else k): _camel(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_camel(x) for x in v]
    return v


def _camelled(v: Any, what: str) -> Any:
    try:
        return _camel(v)
    except RecursionError:
        raise MalformedOTLP(f"{what} nested too deeply") from None


# The document's structure as add_json reads it, shared with json_rows: a count that read
# other keys than the ones whose spans are stored ("spans_" is "spans" once camelled, and of
# two keys that camel to one name the later wins) would let a request past the row limit.
def _json_resource_spans(doc: Any) -> list:
    if not isinstance(doc, dict):
        raise MalformedOTLP("OTLP/JSON payload must be an object with a resourceSpans list")
    resource_spans = doc.get("resourceSpans")
    if resource_spans is None and "resource_spans" in doc:
        resource_spans = _camelled(doc["resource_spans"], "resource_spans")
    return _objects(resource_spans or [], "resourceSpans")


def _json_scope_spans(rs: dict) -> list:
    if "scopeSpans" not in rs and ("scope_spans" in rs or "instrumentation_library_spans" in rs):
        rs = _camelled(rs, "resourceSpans entry")  # snake_case below a camelCase top level
    return _objects(rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", [])) or [], "scopeSpans")


def _objects(v: Any, what: str) -> list:
    """``v``, which must be a list of objects."""
    if not isinstance(v, list):
        raise MalformedOTLP(f"{what} must be a list")
    if not all(isinstance(x, dict) for x in v):
        raise MalformedOTLP(f"each {what} entry must be an object")
    return v


def _json_spans(ss: dict) -> list:
    spans = ss.get("spans", []) or []
    if not isinstance(spans, list):
        raise MalformedOTLP("spans must be a list")
    return spans


def _json_span(span: Any) -> dict:
    """The span with camelCase field names (TypeError for a span that is no object)."""
    if "traceId" not in span and "trace_id" in span:  # snake_case below camelCase
        span = _camelled(span, "span")
    return span


# what a span's own parse failure raises: the span is rejected, not the request (OverflowError:
# float() of an integer past a double's range, which JSON can write as a doubleValue)
_SPAN_ERRORS = (TypeError, ValueError, AttributeError, binascii.Error, RecursionError, OverflowError)


def add_json(doc: Any, batch: SpanBatch) -> int:
    """Append every span of an OTLP/JSON ExportTraceServiceRequest or TracesData dict.

    Field names may be lowerCamelCase (the spec) or snake_case (the proto names).
    """
    seen = 0
    limits = batch.limits
    for rs in _json_resource_spans(doc):
        try:
            resource = make_resource(_json_attrs((rs.get("resource") or {}).get("attributes")), limits)
        except _SPAN_ERRORS as e:
            raise MalformedOTLP(f"malformed resource: {e}") from None
        for ss in _json_scope_spans(rs):
            scope = ss.get("scope", ss.get("instrumentationLibrary")) or {}
            for span in _json_spans(ss):
                seen += 1
                try:
                    span = _json_span(span)
                    status = span.get("status") or {}
                    batch.add_span(
                        trace_id=_json_id(span.get("traceId"), 16),
                        span_id=_json_id(span.get("spanId"), 8),
                        parent_span_id=_json_id(span.get("parentSpanId"), 8),
                        name=_json_str(span.get("name")),
                        kind=_json_enum(span.get("kind"), _KIND_NAMES, "kind"),
                        start_time_unix_nano=_json_int(span.get("startTimeUnixNano", 0), "startTimeUnixNano"),
                        end_time_unix_nano=_json_int(span.get("endTimeUnixNano", 0), "endTimeUnixNano"),
                        status_code=_json_enum(status.get("code"), _STATUS_NAMES, "status.code"),
                        status_message=status.get("message"),
                        trace_state=span.get("traceState"),
                        scope_name=scope.get("name"),
                        scope_version=scope.get("version"),
                        resource=resource,
                        attributes=_json_attrs(span.get("attributes")),
                        events=[
                            (_json_int(e.get("timeUnixNano", 0), "event timeUnixNano"), _json_str(e.get("name")),
                             _json_attrs(e.get("attributes")), _json_int(e.get("droppedAttributesCount", 0), "droppedAttributesCount"))
                            for e in span.get("events") or []
                        ],
                        links=[
                            (_json_id(l.get("traceId"), 16), _json_id(l.get("spanId"), 8), l.get("traceState"),
                             _json_attrs(l.get("attributes")), _json_int(l.get("droppedAttributesCount", 0), "droppedAttributesCount"))
                            for l in span.get("links") or []
                        ],
                        dropped_attributes_count=_json_int(span.get("droppedAttributesCount", 0), "droppedAttributesCount"),
                        dropped_events_count=_json_int(span.get("droppedEventsCount", 0), "droppedEventsCount"),
                        dropped_links_count=_json_int(span.get("droppedLinksCount", 0), "droppedLinksCount"),
                    )
                except _SPAN_ERRORS as e:
                    batch.reject(f"malformed span: {e}")
    return seen


def json_rows(doc: Any) -> int:
    """The spans, events and links of an OTLP/JSON document, read as add_json reads them;
    raises :class:`MalformedOTLP` where add_json would. A span add_json would reject counts
    one row, and its events and links count when they are a list (only a list yields rows)."""
    rows = 0
    for rs in _json_resource_spans(doc):
        for ss in _json_scope_spans(rs):
            for span in _json_spans(ss):
                rows += 1
                try:
                    span = _json_span(span)
                    rows += sum(len(v) for v in (span.get("events"), span.get("links")) if isinstance(v, list))
                except _SPAN_ERRORS:
                    pass
    return rows


def parse_json(body: bytes | str) -> Any:
    """Decode an OTLP/JSON document; raise :class:`MalformedOTLP` with the reason."""
    try:
        if isinstance(body, bytes):
            body = body.decode("utf-8")
        return json.loads(body)
    except UnicodeDecodeError as e:
        raise MalformedOTLP(f"OTLP/JSON must be UTF-8: invalid byte at offset {e.start}") from None
    except json.JSONDecodeError as e:
        raise MalformedOTLP(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise MalformedOTLP("JSON nested too deeply") from None
