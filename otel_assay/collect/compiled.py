"""The receiver's one entry for protobuf requests, :func:`protobuf_batch`, and its one fast
path, the compiled decoder ``_otlpc`` (C, built at install when a compiler is there).

The simple path (``otlp.parse_protobuf`` and ``otlp.add_protobuf``: the generated OTLP
classes into the row builder) has every rule. The compiled decoder reads only the common
request, whose spans are all plain: attribute values (of spans, events and links) that are
strings, ints, bools or finite doubles, valid UTF-8 within the limits, no repeated keys,
nothing to reject, drop or cut. It fills the buffers of the ``spans``, ``span_events`` and
``span_links`` tables without a Python object per span, event, link or attribute (agent
traces: 1.1 us of CPU per span, against 15 on the simple path), and declines every other
request, which then takes the simple path. Whatever it reads must come out as the simple path's tables, byte for
byte (a differential fuzz test holds it to that).

``OTEL_ASSAY_PURE_PYTHON`` set to 1, true, yes or on forces the simple path.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pyarrow as pa
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from .. import semconv
from ..settings import pure_python
from ..lake.rows import SpanBatch, _safe_string_array, make_resource, resource_maps
from ..lake.schema import EMPTY_TABLES, PARTITION_TIME, SPAN_EVENTS_SCHEMA, SPAN_LINKS_SCHEMA, SPANS_SCHEMA, Limits
from .otlp import MalformedOTLP, TooManyRows, add_protobuf, parse_protobuf, pb_attributes, request_rows

try:
    from . import _otlpc
except ImportError:  # not built: no compiler at install, or another platform
    _otlpc = None

_TYPES = {"string": 0, "int64": 1, "double": 2}
_PROMOTED = [(key, _TYPES[t]) for _col, key, t in semconv.PROMOTED_SPAN_ATTRIBUTES]
_PROMOTED_COLUMNS = {col: i for i, (col, _key, _t) in enumerate(semconv.PROMOTED_SPAN_ATTRIBUTES)}


def available() -> bool:
    """Whether requests can take the compiled decoder (built, and not turned off)."""
    return _otlpc is not None and not pure_python()


def _array(typ: pa.DataType, n: int, col: tuple) -> pa.Array:
    data, offsets, valid, nulls = col
    validity = pa.py_buffer(valid) if valid is not None else None
    if offsets is None:
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(data)], null_count=nulls)
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


_ROW_SCHEMAS = {"span_events": SPAN_EVENTS_SCHEMA, "span_links": SPAN_LINKS_SCHEMA}


def _map(n: int, offsets: bytes, keys: tuple, values: tuple) -> pa.MapArray:
    entries = len(keys[1]) // 4 - 1  # the keys' own string offsets: one more than there are keys
    return pa.MapArray.from_arrays(pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(offsets)]),
                                   _array(pa.string(), entries, keys), _array(pa.string(), entries, values))


class CompiledBatch:
    """The spans of one request as read by ``_otlpc``: what the receiver needs of a
    :class:`~otel_assay.lake.rows.SpanBatch` (nothing is ever rejected here)."""

    rejected = 0

    def __init__(self, decoded: tuple, limits: Limits):
        (self.n, self._cols, self._promoted, self._map_offsets, self.keys, groups, resources,
         self._n_events, self._ev_map_offsets, self._n_links, self._ln_map_offsets) = decoded
        self.reject_reasons: dict[str, int] = {}
        self._groups = groups
        # resource attributes come serialized, and are read here with the generated class, as the
        # simple path reads them; one that is not UTF-8 leaves the spans without their resource
        try:
            self._resources = [make_resource(pb_attributes(map(KeyValue.FromString, kvs)), limits)
                               for kvs in resources]
        except Exception as e:
            raise MalformedOTLP(f"malformed resource attributes: {type(e).__name__}: {str(e)[:200]}") from None

    def __len__(self) -> int:
        return self.n

    def tables(self, keep: list[bool] | None = None) -> dict[str, pa.Table]:
        n, cols = self.n, self._cols
        if not n:  # building the empty columns one by one cost an empty request 200 µs
            return dict(EMPTY_TABLES)
        group = np.frombuffer(cols["group"][0], np.int32)
        group_resource = np.array([g[0] for g in self._groups], np.int32)
        span_resource = pa.array(group_resource[group])
        # an SDK resource's service name can hold text that is not UTF-8: replaced, as SpanBatch does
        services = _safe_string_array([r.service_name for r in self._resources])
        scope_names = _safe_string_array([g[1] for g in self._groups])
        scope_versions = _safe_string_array([g[2] for g in self._groups])
        group_index = pa.array(group)
        attributes = _map(n, self._map_offsets, cols["map_keys"], cols["map_values"])
        arrays = []
        for f in SPANS_SCHEMA:
            name = f.name
            if name == "attributes":
                arrays.append(attributes)
            elif name == "resource_attributes":
                arrays.append(resource_maps(self._resources).take(span_resource))
            elif name == "service_name":
                arrays.append(services.take(span_resource))
            elif name == "scope_name":
                arrays.append(scope_names.take(group_index))
            elif name == "scope_version":
                arrays.append(scope_versions.take(group_index))
            elif name in _PROMOTED_COLUMNS:
                arrays.append(_array(f.type, n, self._promoted[_PROMOTED_COLUMNS[name]]))
            else:
                arrays.append(_array(f.type, n, cols[name]))
        spans = pa.Table.from_arrays(arrays, schema=SPANS_SCHEMA)
        mask = None if keep is None else pa.array(keep, pa.bool_())
        if mask is not None:
            spans = spans.filter(mask)
        return {"spans": spans,
                "span_events": self._of_spans("span_events", "ev_", self._n_events, self._ev_map_offsets, mask),
                "span_links": self._of_spans("span_links", "ln_", self._n_links, self._ln_map_offsets, mask)}

    def _of_spans(self, table: str, prefix: str, m: int, map_offsets: bytes, mask: pa.Array | None) -> pa.Table:
        """The span_events or span_links table (with its partition time, as SpanBatch.tables
        gives it); an event or link goes with its span when ``mask`` leaves spans out."""
        if not m:
            return EMPTY_TABLES[table]
        cols, schema = self._cols, _ROW_SCHEMAS[table]
        arrays = []
        for f in schema:
            if f.name == "attributes":
                arrays.append(_map(m, map_offsets, cols[prefix + "map_keys"], cols[prefix + "map_values"]))
            else:
                arrays.append(_array(f.type, m, cols[prefix + f.name]))
        rows = pa.Table.from_arrays(arrays, schema=schema).append_column(
            PARTITION_TIME, _array(pa.int64(), m, cols[prefix + "partition_time"]))
        if mask is not None:
            rows = rows.filter(mask.take(_array(pa.int32(), m, cols[prefix + "span_row"])))
        return rows


def protobuf_batch(body: bytes, limits: Limits, max_rows: int) -> tuple["CompiledBatch | SpanBatch", int]:
    """The rows of a protobuf request, and how many spans it held: read by the compiled
    decoder when it is built and takes the request, else by the simple path.

    Raises :class:`TooManyRows` for a request of more than ``max_rows`` spans, events and
    links before decoding them, :class:`MalformedOTLP` for bytes that are no request.
    """
    fast = decode(body, limits, max_rows)  # stops past max_rows
    if fast is not None:
        return fast, len(fast)
    # the simple path parses the whole request before any code of ours sees a span: the rows
    # are counted on the wire first where the extension can, else once parsed
    counted = count_rows(body)
    if counted is not None and counted > max_rows:
        raise TooManyRows(counted, max_rows)
    parsed = parse_protobuf(body)
    if counted is None and (rows := request_rows(parsed)) > max_rows:
        raise TooManyRows(rows, max_rows)
    batch = SpanBatch(limits)
    received = add_protobuf(parsed, batch)
    return batch, received


def decode(body: bytes, limits: Limits, max_rows: int | None = None) -> CompiledBatch | None:
    """The request's spans, or None when it needs the Python path (see the module doc).

    Raises :class:`TooManyRows` as soon as it has read more than ``max_rows`` spans, events
    and links (None: no limit), before allocating the rest."""
    if not available():
        return None
    decoded: Any = _otlpc.decode(body, _PROMOTED, limits.max_value_chars, limits.max_key_chars, limits.max_attributes,
                                 limits.max_events, limits.max_links, sys.maxsize if max_rows is None else max_rows)
    if isinstance(decoded, int):
        raise TooManyRows(decoded, max_rows, exact=False)
    if decoded is None:
        return None
    try:
        return CompiledBatch(decoded, limits)
    except MalformedOTLP:
        # a resource whose attributes do not parse (text that is not UTF-8): the simple path
        # refuses the request too, and says which rule the text breaks
        return None


def count_rows(body: bytes) -> int | None:
    """The spans, events and links in a protobuf request, counted on the wire without decoding
    them (a few milliseconds for 20 MiB); None without the extension or for bytes that are no
    protobuf message. Also with ``OTEL_ASSAY_PURE_PYTHON=1``: this is a guard, not a path."""
    return _otlpc.count_rows(body) if _otlpc is not None else None
