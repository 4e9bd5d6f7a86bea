"""A faster read of OTLP trace protobufs for the receiver's hot loop.

Reading attributes through the generated classes costs about a microsecond per attribute
(a Python wrapper per KeyValue and per AnyValue, then an accessor call for each field),
which made attribute access two thirds of the receiver's CPU time. Here the same wire bytes
are parsed with a shadow schema, identical to OTLP's except that every ``attributes``
field is declared ``repeated bytes``: upb hands each KeyValue back as one bytes object,
which is decoded once and cached — agent spans repeat most of their attributes (scenario,
version, run, operation, model) from span to span, so most attributes cost one dict lookup.

Only the wire layout matters: field numbers and wire types match
opentelemetry/proto/trace/v1/trace.proto, so a valid OTLP message parses identically.
KeyValues this decoder does not handle in its fast path (arrays, key-value lists, bytes,
unusual field order) are parsed with the generated ``KeyValue`` class.
"""

from __future__ import annotations

import struct
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED


def _build(text: int):
    """The shadow schema with ``text`` (string or bytes) as the type of the spans' text fields."""
    fdp = descriptor_pb2.FileDescriptorProto(name="otel_assay_fast_trace.proto", package="otel_assay.fastpb",
                                             syntax="proto3")

    def msg(name, fields):
        m = fdp.message_type.add(name=name)
        for fname, num, typ, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=typ, label=label)
            if tname:
                f.type_name = ".otel_assay.fastpb." + tname

    msg("Status", [("message", 2, text, _OPT, None), ("code", 3, _F.TYPE_INT32, _OPT, None)])
    msg("Event", [("time_unix_nano", 1, _F.TYPE_FIXED64, _OPT, None), ("name", 2, text, _OPT, None),
                  ("attributes", 3, _F.TYPE_BYTES, _REP, None),
                  ("dropped_attributes_count", 4, _F.TYPE_UINT32, _OPT, None)])
    msg("Link", [("trace_id", 1, _F.TYPE_BYTES, _OPT, None), ("span_id", 2, _F.TYPE_BYTES, _OPT, None),
                 ("trace_state", 3, text, _OPT, None), ("attributes", 4, _F.TYPE_BYTES, _REP, None),
                 ("dropped_attributes_count", 5, _F.TYPE_UINT32, _OPT, None), ("flags", 6, _F.TYPE_FIXED32, _OPT, None)])
    msg("Span", [("trace_id", 1, _F.TYPE_BYTES, _OPT, None), ("span_id", 2, _F.TYPE_BYTES, _OPT, None),
                 ("trace_state", 3, text, _OPT, None), ("parent_span_id", 4, _F.TYPE_BYTES, _OPT, None),
                 ("name", 5, text, _OPT, None), ("kind", 6, _F.TYPE_INT32, _OPT, None),
                 ("start_time_unix_nano", 7, _F.TYPE_FIXED64, _OPT, None),
                 ("end_time_unix_nano", 8, _F.TYPE_FIXED64, _OPT, None),
                 ("attributes", 9, _F.TYPE_BYTES, _REP, None),
                 ("dropped_attributes_count", 10, _F.TYPE_UINT32, _OPT, None),
                 ("events", 11, _F.TYPE_MESSAGE, _REP, "Event"),
                 ("dropped_events_count", 12, _F.TYPE_UINT32, _OPT, None),
                 ("links", 13, _F.TYPE_MESSAGE, _REP, "Link"),
                 ("dropped_links_count", 14, _F.TYPE_UINT32, _OPT, None),
                 ("status", 15, _F.TYPE_MESSAGE, _OPT, "Status"), ("flags", 16, _F.TYPE_FIXED32, _OPT, None)])
    msg("Scope", [("name", 1, text, _OPT, None), ("version", 2, text, _OPT, None),
                  ("attributes", 3, _F.TYPE_BYTES, _REP, None)])
    # schema_url is never read: bytes, so that one that is not UTF-8 costs nothing
    msg("ScopeSpans", [("scope", 1, _F.TYPE_MESSAGE, _OPT, "Scope"), ("spans", 2, _F.TYPE_MESSAGE, _REP, "Span"),
                       ("schema_url", 3, _F.TYPE_BYTES, _OPT, None)])
    msg("Resource", [("attributes", 1, _F.TYPE_BYTES, _REP, None),
                     ("dropped_attributes_count", 2, _F.TYPE_UINT32, _OPT, None)])
    msg("ResourceSpans", [("resource", 1, _F.TYPE_MESSAGE, _OPT, "Resource"),
                          ("scope_spans", 2, _F.TYPE_MESSAGE, _REP, "ScopeSpans"),
                          ("schema_url", 3, _F.TYPE_BYTES, _OPT, None)])
    msg("Request", [("resource_spans", 1, _F.TYPE_MESSAGE, _REP, "ResourceSpans")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("otel_assay.fastpb.Request"))


Request = _build(_F.TYPE_STRING)
# the same with every text field as bytes: parses what upb refuses for a string that is not
# UTF-8 (proto3 requires it), so that such a string costs its span and not the whole request
_LenientRequest = _build(_F.TYPE_BYTES)


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _text_error(span) -> str | None:
    for what, text in (("span name", span.name), ("trace_state", span.trace_state),
                       ("status message", span.status.message)):
        if not _utf8(text):
            return f"{what} is not valid UTF-8 (protobuf strings must be)"
    if not all(_utf8(e.name) for e in span.events):
        return "event name is not valid UTF-8 (protobuf strings must be)"
    if not all(_utf8(l.trace_state) for l in span.links):
        return "link trace_state is not valid UTF-8 (protobuf strings must be)"
    return None


def salvage(body: bytes) -> tuple[Any, list[str]] | None:
    """A body upb refused, as a :data:`Request` of its spans whose text is UTF-8, and the
    reason for each span left out; None when the body is malformed otherwise.

    Such a span is rejected, as one with an attribute that is not UTF-8 is: replacing the
    bad bytes would store a name that the agent never had, under which it would be counted.
    Only called once the strict parse has failed: valid requests pay nothing for it.
    """
    lenient = _LenientRequest()
    try:
        lenient.ParseFromString(body)
    except Exception:  # DecodeError, or RuntimeError on deep nesting
        return None
    reasons: list[str] = []
    for rs in lenient.resource_spans:
        bad_scopes = []
        for j, ss in enumerate(rs.scope_spans):
            if not (_utf8(ss.scope.name) and _utf8(ss.scope.version)):
                reasons += ["instrumentation scope name or version is not valid UTF-8 (protobuf strings must be)"] * len(ss.spans)
                bad_scopes.append(j)
                continue
            bad = [(i, why) for i, span in enumerate(ss.spans) if (why := _text_error(span))]
            for i, why in reversed(bad):
                reasons.append(why)
                del ss.spans[i]
        for j in reversed(bad_scopes):
            del rs.scope_spans[j]
    if not reasons:
        return None
    req = Request()
    try:
        req.ParseFromString(lenient.SerializeToString())
    except Exception:
        return None
    return req, reasons


_DOUBLE = struct.Struct("<d")
_MISSING = object()


def _varint(b: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = b[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            # a tenth byte can carry bits past the 64th, which protobuf drops (so does upb)
            return result & 0xFFFF_FFFF_FFFF_FFFF, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


class NotUTF8(ValueError):
    """An attribute key or string value that is not UTF-8, as protobuf strings must be."""


def decode_keyvalue(b: bytes) -> tuple[str, Any]:
    """(key, value) of one serialized KeyValue; values as Python objects like otlp._pb_value."""
    try:
        # A value seen for the first time is decoded here, about once per span: the usual
        # KeyValue (a key and a string or an int, each under 128 bytes, one-byte lengths) is
        # read without a call per varint.
        if b[0] == 0x0A and (n := b[1]) < 0x80:
            i = 2 + n
            end = len(b)
            if i + 3 < end and b[i] == 0x12 and b[i + 1] < 0x80 and i + 2 + b[i + 1] == end:
                tag = b[i + 2]
                if tag == 0x0A:  # string_value
                    m = b[i + 3]
                    if m < 0x80 and i + 4 + m == end:
                        return b[2:i].decode("utf-8"), b[i + 4:].decode("utf-8")
                elif tag == 0x18:  # int_value
                    x, j = _varint(b, i + 3)
                    if j == end:
                        return b[2:i].decode("utf-8"), x - (1 << 64) if x >= (1 << 63) else x
        if b[0] == 0x0A:  # field 1 (key), length-delimited
            n, i = _varint(b, 1)
            key = b[i:i + n].decode("utf-8")
            i += n
            if i == len(b):
                return key, None
            if b[i] == 0x12:  # field 2 (value: AnyValue)
                n, i = _varint(b, i + 1)
                v = b[i:i + n]
                if i + n == len(b):
                    value = _decode_anyvalue(v)
                    if value is not _MISSING:
                        return key, value
    except UnicodeDecodeError:
        # the common layout, so truly a string: the generated class would only say DecodeError
        raise NotUTF8("attribute key or string value is not valid UTF-8 (protobuf strings must be)") from None
    except (IndexError, ValueError):
        pass  # not the common layout (or malformed): let the generated class decide
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

    from .otlp import _pb_value

    kv = KeyValue.FromString(b)  # raises DecodeError on malformed bytes
    return kv.key, _pb_value(kv.value)


def _decode_anyvalue(v: bytes) -> Any:
    if not v:
        return None
    tag = v[0]
    if tag == 0x0A:  # string_value
        n, i = _varint(v, 1)
        if i + n == len(v):
            return v[i:i + n].decode("utf-8")
    elif tag == 0x18:  # int_value (int64, two's complement varint)
        x, i = _varint(v, 1)
        if i == len(v):
            return x - (1 << 64) if x >= (1 << 63) else x
    elif tag == 0x10:  # bool_value
        x, i = _varint(v, 1)
        if i == len(v):
            return bool(x)
    elif tag == 0x21 and len(v) == 9:  # double_value (fixed64)
        return _DOUBLE.unpack_from(v, 1)[0]
    return _MISSING
