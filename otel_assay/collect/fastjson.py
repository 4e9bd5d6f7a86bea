"""The fast path for OTLP/JSON: one record (a JSON line or document) decoded by ``msgspec``
straight into typed structures, and its spans handed to the row builder as whole columns.

Why this shape. Importing a Collector export spent its CPU on three things, measured on
200,000 agent spans of JSON Lines (one CPU-second = one second of one core):
``json.loads`` into dicts (0.9 s), the span-by-span walk over those dicts into
``SpanBatch.add_span`` (4.4 s: a function call, a dict lookup and a type check per field)
and the garbage collector, which the millions of dicts a chunk holds set off again and again
(3 s). Parsing alone differs little between parsers (orjson 0.66 s, msgspec into ``Any``
0.58 s, json 0.86 s); what ``msgspec`` adds is decoding into ``Struct`` types declared for
the OTLP shapes, which checks every field's JSON type while it parses (in C) and builds no
dict, and whose objects the collector does not track (``gc=False``). Reading the columns
with pyarrow or DuckDB was not taken: OTLP's recursive AnyValue (arrays, key-value lists)
and its fields that may be numbers or strings have no one Arrow type, so every rule below
would be a second implementation in SQL.

The rule that keeps the rows identical: this path reads only *plain* records, the common
case, and declines every other record, which then takes the simple path (``json.loads`` and
``otlp.add_json``) with all its rules. A record is plain when it has camelCase field names of
OTLP's spans and no other; ids that are hex or base64 of the right length; integer times
(numbers or decimal strings) that the row builder takes; enum names or numbers; attribute
values that are strings, integers, booleans, finite doubles, bytes or arrays and key-value
lists of those; and nothing that the row builder would reject, drop, truncate or merge
(limits, repeated keys, bad links). Whatever it reads comes out as the simple path's rows, in
the same order, byte for byte: a differential fuzz test (tests/collect/test_fastjson.py)
holds it to that.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType

from .. import semconv
from ..settings import pure_python
from ..lake.rows import PlainRows, SpanBatch, make_resource, stringify
from ..lake.schema import INT32_MAX, INT64_MAX
from .otlp import _KIND_NAMES, _STATUS_NAMES, _json_id, _json_key


class _AnyValue(Struct, forbid_unknown_fields=True, gc=False):
    stringValue: str | UnsetType = UNSET
    intValue: int | str | UnsetType = UNSET
    boolValue: bool | UnsetType = UNSET
    doubleValue: float | UnsetType = UNSET
    arrayValue: "_ArrayValue | UnsetType" = UNSET
    kvlistValue: "_KvList | UnsetType" = UNSET
    bytesValue: str | UnsetType = UNSET


class _KeyValue(Struct, forbid_unknown_fields=True, gc=False):
    key: str
    value: _AnyValue | UnsetType = UNSET


class _ArrayValue(Struct, forbid_unknown_fields=True, gc=False):
    values: list[_AnyValue] = []


class _KvList(Struct, forbid_unknown_fields=True, gc=False):
    values: list[_KeyValue] = []


class _Status(Struct, forbid_unknown_fields=True, gc=False):
    code: int | str | None = None
    message: str | None = None


class _Event(Struct, forbid_unknown_fields=True, gc=False):
    timeUnixNano: int | str = 0
    name: str | None = None
    attributes: list[_KeyValue] = []
    droppedAttributesCount: int = 0


class _Link(Struct, forbid_unknown_fields=True, gc=False):
    traceId: str = ""
    spanId: str = ""
    traceState: str | None = None
    attributes: list[_KeyValue] = []
    droppedAttributesCount: int = 0
    flags: int = 0


class _Span(Struct, forbid_unknown_fields=True, gc=False):
    traceId: str = ""
    spanId: str = ""
    parentSpanId: str = ""
    traceState: str | None = None
    name: str | None = None
    kind: int | str | None = None
    startTimeUnixNano: int | str = 0
    endTimeUnixNano: int | str = 0
    attributes: list[_KeyValue] = []
    droppedAttributesCount: int = 0
    events: list[_Event] = []
    droppedEventsCount: int = 0
    links: list[_Link] = []
    droppedLinksCount: int = 0
    status: _Status | None = None
    flags: int = 0


class _Scope(Struct, forbid_unknown_fields=True, gc=False):
    name: str | None = None
    version: str | None = None
    attributes: msgspec.Raw = msgspec.Raw(b"")  # not stored
    droppedAttributesCount: msgspec.Raw = msgspec.Raw(b"")


class _ScopeSpans(Struct, forbid_unknown_fields=True, gc=False):
    scope: _Scope | None = None
    spans: list[_Span] | None = None
    schemaUrl: msgspec.Raw = msgspec.Raw(b"")


class _Resource(Struct, forbid_unknown_fields=True, gc=False):
    attributes: list[_KeyValue] | None = None
    droppedAttributesCount: msgspec.Raw = msgspec.Raw(b"")
    entityRefs: msgspec.Raw = msgspec.Raw(b"")


class _ResourceSpans(Struct, forbid_unknown_fields=True, gc=False):
    resource: _Resource | None = None
    scopeSpans: list[_ScopeSpans] | None = None
    schemaUrl: msgspec.Raw = msgspec.Raw(b"")


class _Request(Struct, forbid_unknown_fields=True, gc=False):
    resourceSpans: list[_ResourceSpans] | None = None


_decode = msgspec.json.Decoder(_Request).decode


class _Decline(Exception):
    """The record is not plain: the simple path reads it."""


# key -> (the index of its promoted column, the Python type a value must have to go there)
_PROMOTED = {key: (i, {"string": str, "int64": int, "double": float}[t])
             for i, (_col, key, t) in enumerate(semconv.PROMOTED_SPAN_ATTRIBUTES)}
_NO_PROMOTED = [None] * len(_PROMOTED)
_HEX = re.compile(r"[0-9a-fA-F]*")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16


def _value(v: _AnyValue | UnsetType) -> Any:
    """An AnyValue as ``otlp._json_value`` reads it: the first field present, in its order."""
    if v is UNSET:
        return None
    if v.stringValue is not UNSET:
        return v.stringValue
    if v.intValue is not UNSET:
        i = v.intValue
        return i if type(i) is int else int(i)  # as otlp._json_int; a ValueError declines
    if v.boolValue is not UNSET:
        return v.boolValue
    if v.doubleValue is not UNSET:
        return v.doubleValue
    if v.arrayValue is not UNSET:
        return [_value(x) for x in v.arrayValue.values]
    if v.kvlistValue is not UNSET:
        return {kv.key: _value(kv.value) for kv in v.kvlistValue.values}
    if v.bytesValue is not UNSET:
        return base64.b64decode(v.bytesValue)  # binascii.Error declines the record
    return None


def add_json_record(body: bytes, batch: SpanBatch) -> int | None:
    """Append the spans of one OTLP/JSON record when it is plain and return how many it held;
    None (and nothing appended) when the simple path must read it, as it reads every record
    with ``OTEL_ASSAY_PURE_PYTHON`` set."""
    if pure_python():
        return None
    try:
        request = _decode(body)
    except (msgspec.MsgspecError, ValueError, RecursionError):  # invalid UTF-8: UnicodeDecodeError
        return None
    rows = PlainRows()
    try:
        seen = _rows(request, rows, batch)
    except (_Decline, ValueError, TypeError, OverflowError, RecursionError, binascii.Error):
        return None
    batch.add_plain(rows)
    return seen


def _attributes(kvs: list[_KeyValue], keys: list, values: list, promoted: list | None, max_value: int,
                max_attributes: int) -> int:
    """Append one map's attributes (promoting where ``promoted`` is given); return how many
    went into the map. Declines what the row builder would drop, cut or merge (the keys'
    lengths are checked once per record, by the caller).

    Keys are taken as they are: ``otlp._json_key`` replaces lone surrogates, which msgspec
    refuses to decode (the record then takes the simple path)."""
    n = 0
    for kv in kvs:
        key = kv.key
        v = kv.value
        if v is UNSET:
            value = None
        else:
            value = v.stringValue
            if value is UNSET:
                value = _value(v)
        if promoted is not None:
            target = _PROMOTED.get(key)
            if target is not None and type(value) is target[1] and promoted[target[0]] is None:
                if type(value) is int and not -INT64_MAX - 1 <= value <= INT64_MAX:
                    pass  # stays in the map, as the row builder leaves it
                else:
                    if type(value) is str and len(value) > max_value:
                        raise _Decline
                    promoted[target[0]] = value
                    continue
        if type(value) is not str:
            value = stringify(value)
            if value is not None and len(value) > max_value:
                raise _Decline
        elif len(value) > max_value:
            raise _Decline
        keys.append(key)
        values.append(value)
        n += 1
    if n > 1 and (n > max_attributes or len(set(keys[len(keys) - n:])) != n):
        raise _Decline
    return n


def _count(n: int) -> int:
    return min(max(n, 0), INT32_MAX)


def _rows(request: _Request, rows: PlainRows, batch: SpanBatch) -> int:
    limits = batch.limits
    max_value, max_attributes = limits.max_value_chars, limits.max_attributes
    seen = 0
    ids: list[str] = []  # every id of the record, checked as hex in one match
    add_id = ids.append
    spans, add_span = rows.spans, rows.spans.append
    attr_keys, attr_values = rows.attr_keys, rows.attr_values
    for rs in request.resourceSpans or ():
        res = rs.resource
        attrs = res.attributes if res is not None else None
        resource = make_resource([(_json_key(kv.key), _value(kv.value)) for kv in attrs or ()], limits)
        for ss in rs.scopeSpans or ():
            scope = ss.scope
            scope_name = scope.name or None if scope is not None else None
            scope_version = scope.version or None if scope is not None else None
            for span in ss.spans or ():
                seen += 1
                trace_id = span.traceId
                span_id = span.spanId
                parent = span.parentSpanId
                if len(trace_id) != 32:
                    trace_id = _json_id(trace_id, 16)
                if len(span_id) != 16:
                    span_id = _json_id(span_id, 8)
                if len(trace_id) != 32 or len(span_id) != 16 or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
                    raise _Decline
                add_id(trace_id)
                add_id(span_id)
                if parent:
                    if len(parent) != 16:
                        parent = _json_id(parent, 8)
                        if len(parent) != 16:
                            raise _Decline
                    add_id(parent)
                    parent = None if parent == _ZERO_SPAN else parent
                else:
                    parent = None
                start = span.startTimeUnixNano
                end = span.endTimeUnixNano
                if type(start) is not int:
                    start = int(start)
                if type(end) is not int:
                    end = int(end)
                if not 0 < start <= end <= INT64_MAX:
                    raise _Decline
                kind = span.kind
                if type(kind) is not int:
                    kind = 0 if kind is None else _KIND_NAMES[kind] if kind in _KIND_NAMES else int(kind)
                status = span.status
                if status is None:
                    code, message = 0, None
                else:
                    code, message = status.code, status.message or None
                    if type(code) is not int:
                        code = 0 if code is None else _STATUS_NAMES[code] if code in _STATUS_NAMES else int(code)
                    if message and len(message) > max_value:
                        raise _Decline
                if not (0 <= kind <= 5 and 0 <= code <= 2):
                    raise _Decline
                name = span.name or ""
                if len(name) > max_value:
                    raise _Decline
                promoted = _NO_PROMOTED.copy()
                n = _attributes(span.attributes, attr_keys, attr_values, promoted, max_value, max_attributes) if span.attributes else 0
                row = len(spans)
                dropped_a, dropped_e, dropped_l = span.droppedAttributesCount, span.droppedEventsCount, span.droppedLinksCount
                if dropped_a or dropped_e or dropped_l:
                    dropped_a, dropped_e, dropped_l = _count(dropped_a), _count(dropped_e), _count(dropped_l)
                add_span((trace_id, span_id, parent, span.traceState or None, name, kind, start, end - start, code,
                          message, scope_name, scope_version, dropped_a, dropped_e, dropped_l, resource, promoted, n))
                if span.events:
                    if len(span.events) > limits.max_events:
                        raise _Decline
                    for e in span.events:
                        ename = e.name or ""
                        if len(ename) > max_value:
                            raise _Decline
                        time = e.timeUnixNano
                        time = min(max(time if type(time) is int else int(time), 0), INT64_MAX)
                        n = _attributes(e.attributes, rows.ev_attr_keys, rows.ev_attr_values, None, max_value, max_attributes)
                        rows.events.append((row, time, ename, _count(e.droppedAttributesCount), n))
                if span.links:
                    if len(span.links) > limits.max_links:
                        raise _Decline
                    for l in span.links:
                        l_trace, l_span = _json_id(l.traceId, 16), _json_id(l.spanId, 8)
                        if (len(l_trace) != 32 or len(l_span) != 16 or l_trace == _ZERO_TRACE
                                or l_span == _ZERO_SPAN):
                            raise _Decline  # the row builder drops and counts it
                        add_id(l_trace)
                        add_id(l_span)
                        n = _attributes(l.attributes, rows.ln_attr_keys, rows.ln_attr_values, None, max_value, max_attributes)
                        rows.links.append((row, l_trace, l_span, l.traceState or None,
                                           _count(l.droppedAttributesCount), n))
    if ids:
        joined = "".join(ids)
        if not _HEX.fullmatch(joined):
            raise _Decline
        if joined != joined.lower():  # rare: ids are written in lower case
            _lower_ids(rows)
    for keys in (attr_keys, rows.ev_attr_keys, rows.ln_attr_keys):
        if keys and max(map(len, keys)) > limits.max_key_chars:
            raise _Decline
    return seen


def _lower_ids(rows: PlainRows) -> None:
    """The ids in lower case, as the row builder stores them (read as they were written)."""
    rows.spans[:] = [(t.lower(), s.lower(), p and p.lower(), *rest) for t, s, p, *rest in rows.spans]
    rows.links[:] = [(row, t.lower(), s.lower(), *rest) for row, t, s, *rest in rows.links]
