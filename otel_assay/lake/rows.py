"""The one row builder: :class:`SpanBatch` turns spans, however they were read, into the
lake's columns.

Every reader (the in-process exporter, the OTLP receiver, file import) only turns its
input into the neutral keyword record of :meth:`SpanBatch.add_span`; validation, limits,
truncation, promotion and dropped counts live here once, so a span is stored the same
whichever way it arrives.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import pyarrow as pa

from .. import semconv
from .schema import (DEFAULT_LIMITS, EMPTY_TABLES, INT32_MAX, INT64_MAX, PARTITION_TIME, SPAN_EVENTS_SCHEMA,
                     SPAN_LINKS_SCHEMA, SPANS_SCHEMA, TRUNCATION_MARK, Limits)

# attribute key -> (the index of its promoted column, the column's type)
_PROMOTED = {key: (i, t) for i, (_col, key, t) in enumerate(semconv.PROMOTED_SPAN_ATTRIBUTES)}
_PROMOTED_COLUMNS = [col for col, _key, _t in semconv.PROMOTED_SPAN_ATTRIBUTES]
_PROMOTED_SET = frozenset(_PROMOTED_COLUMNS)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def stringify(value: Any) -> str | None:
    """An attribute value as stored in the lake's string maps.

    str as is; bool as ``true``/``false``; int and float in canonical decimal
    (``repr``, shortest round-trip); bytes as base64; arrays and key-value lists as
    compact JSON. ``None`` (an empty AnyValue) stays NULL.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    # a value the OTel SDK would not allow (a set, a Decimal) in a span built by other code is
    # stored as its text instead of failing the span
    if not isinstance(value, (list, tuple, dict)):
        return str(value)
    return _compact_json(_jsonable(value))


# what json.dumps(separators=(",", ":"), ensure_ascii=False, default=str) builds on every
# call: an encoder, a microsecond of a chat span's export
_compact_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode


_HEX_RE = re.compile(r"[0-9a-fA-F]+")


def _is_hex_id(value: Any, length: int) -> bool:
    """A valid (non-zero, hex, right-length) id, for links: a bad one drops the link only."""
    return (isinstance(value, str) and len(value) == length and _HEX_RE.fullmatch(value) is not None
            and value.strip("0") != "")


class SpanRejected(ValueError):
    """A span that cannot be stored; the message says why (it goes to partial success)."""


def _check_hex_id(value: str, length: int, what: str, *, optional: bool = False) -> str | None:
    if not value:
        if optional:
            return None
        raise SpanRejected(f"{what} is empty")
    if len(value) != length:
        raise SpanRejected(f"{what} must be {length // 2} bytes ({length} hex digits), got {len(value)} hex digits")
    # not int(value, 16): it also takes a sign, surrounding whitespace and non-ASCII digits
    # ("+aa…", " aa…", "٣٣…"), which were stored as ids that match no other span's
    if not _HEX_RE.fullmatch(value):
        raise SpanRejected(f"{what} is not hexadecimal")
    if value.strip("0") == "":
        if optional:
            return None
        raise SpanRejected(f"{what} is all zeros (invalid per W3C trace context)")
    return value.lower()


@dataclass
class _Maps:
    offsets: list[int] = field(default_factory=lambda: [0])
    keys: list[str] = field(default_factory=list)
    values: list[str | None] = field(default_factory=list)

    def array(self) -> pa.MapArray:
        return pa.MapArray.from_arrays(
            pa.array(self.offsets, pa.int32()),
            _safe_string_array(self.keys),
            _safe_string_array(self.values),
        )


class _Resources:
    """The resource of each span, as an index into the batch's distinct resources: a process
    sends all its spans with one resource, and copying its attributes into every span's map
    converted them to Arrow once per span."""

    def __init__(self):
        self.rows: list[int] = []
        self.distinct: list[Resource] = []  # held, so that no other object takes an id below
        self._index: dict[int, int] = {}

    def add(self, resource: Resource) -> None:
        """One span's resource."""
        i = self._index.get(id(resource))
        if i is None:
            i = self._index[id(resource)] = len(self.distinct)
            self.distinct.append(resource)
        self.rows.append(i)

    def array(self) -> pa.MapArray:
        return resource_maps(self.distinct).take(pa.array(self.rows, pa.int32()))


def resource_maps(resources: list[Resource]) -> pa.MapArray:
    """One attributes map per resource, in order (rows take from it by resource index)."""
    maps = _Maps()
    for r in resources:
        maps.keys.extend(r.keys)
        maps.values.extend(r.values)
        maps.offsets.append(len(maps.keys))
    return maps.array()


def _safe_string_array(values: list) -> pa.Array:
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, UnicodeEncodeError):
        # JSON can carry lone surrogates ("\ud800"): valid Python str, but not UTF-8
        return pa.array([None if v is None else v.encode("utf-8", "replace").decode("utf-8") for v in values],
                        pa.string())


@dataclass
class Resource:
    """A resource (and scope) prepared once per ResourceSpans / ScopeSpans block."""

    service_name: str | None
    keys: list[str]
    values: list[str | None]


def _keep_first_of_each_key(keys: list[str], values: list, first: int) -> int:
    """Remove repeated keys from ``keys[first:]`` (one span's map), keeping the first value
    (as promotion does); return how many were removed. OTLP forbids repeated keys but a
    protobuf or JSON payload can carry them, and a Parquet map with a repeated key gives
    readers different answers (DuckDB's ``m['k']`` the first, its JSON the last) and fails
    DuckDB's conversion to Python ("Map keys must be unique")."""
    seen: set[str] = set()
    kept_k, kept_v = [], []
    for k, v in zip(keys[first:], values[first:]):
        if k not in seen:
            seen.add(k)
            kept_k.append(k)
            kept_v.append(v)
    removed = len(keys) - first - len(kept_k)
    keys[first:], values[first:] = kept_k, kept_v
    return removed


def make_resource(attributes: Iterable[tuple[str, Any]], limits: Limits = DEFAULT_LIMITS) -> Resource:
    service_name = None
    keys: list[str] = []
    values: list[str | None] = []
    for key, value in attributes:
        if key == semconv.SERVICE_NAME and isinstance(value, str) and service_name is None:
            service_name = value[: limits.max_value_chars]
            continue
        if len(keys) >= limits.max_attributes or len(key) > limits.max_key_chars:
            continue
        keys.append(key)
        values.append(_limit(stringify(value), limits))
    if len(set(keys)) != len(keys):
        _keep_first_of_each_key(keys, values, 0)
    return Resource(service_name, keys, values)


def _limit(s: str | None, limits: Limits) -> str | None:
    if s is not None and len(s) > limits.max_value_chars:
        return s[: limits.max_value_chars] + TRUNCATION_MARK
    return s


def _count(n: int) -> int:
    """A dropped count as the int32 column holds it. OTLP's are uint32, but OTLP/JSON can
    say anything (-1, 2**40), and one out-of-range value failed the whole batch's write."""
    return min(max(n, 0), INT32_MAX)


@dataclass
class PlainRows:
    """Spans a fast reader has already turned into rows, for :meth:`SpanBatch.add_plain`.

    Only *plain* spans belong here: valid, within every limit, with nothing for the row
    builder to reject, drop, cut or merge (no repeated attribute key, no bad link), ids in
    lower case, strings as stored, dropped counts clamped, attribute values as
    :func:`stringify` writes them and promoted ones taken out as :meth:`SpanBatch.add_span`
    takes them. The reader declines anything else, which then goes through ``add_span``;
    a differential test holds each reader's plain rows to ``add_span``'s.

    One tuple per row (one append per span, not one per column), in the order of
    :data:`PLAIN_SPAN`, :data:`PLAIN_EVENT` and :data:`PLAIN_LINK`; a map is the number of
    its entries in the row and its keys and values in the lists beside it; ``promoted`` is a
    list of a value or None per promoted column, in the order of
    ``semconv.PROMOTED_SPAN_ATTRIBUTES``. Events and links name their span by its index
    among ``spans``.
    """

    spans: list[tuple] = field(default_factory=list)
    attr_keys: list[str] = field(default_factory=list)
    attr_values: list[str | None] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    ev_attr_keys: list[str] = field(default_factory=list)
    ev_attr_values: list[str | None] = field(default_factory=list)
    links: list[tuple] = field(default_factory=list)
    ln_attr_keys: list[str] = field(default_factory=list)
    ln_attr_values: list[str | None] = field(default_factory=list)


PLAIN_SPAN = ("trace_id", "span_id", "parent_span_id", "trace_state", "name", "kind", "start_time_unix_nano",
              "duration_ns", "status_code", "status_message", "scope_name", "scope_version",
              "dropped_attributes_count", "dropped_events_count", "dropped_links_count",
              "resource", "promoted", "attributes")
PLAIN_EVENT = ("span", "time_unix_nano", "name", "dropped_attributes_count", "attributes")
PLAIN_LINK = ("span", "linked_trace_id", "linked_span_id", "trace_state", "dropped_attributes_count", "attributes")


def _extend_maps(maps: _Maps, counts: list[int], keys: list[str], values: list) -> None:
    maps.offsets.extend(itertools.accumulate(counts, initial=maps.offsets[-1]))
    del maps.offsets[-len(counts) - 1]  # the initial value, already there
    maps.keys.extend(keys)
    maps.values.extend(values)


class SpanBatch:
    """Columnar buffers for the three lake tables. Not thread-safe: one per producer."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS):
        self.limits = limits
        self._span_cols: dict[str, list] = {name: [] for name in SPANS_SCHEMA.names
                                            if not name.endswith("attributes") and name not in _PROMOTED_SET}
        # each span's promoted attributes as one list, a value (or None) per promoted column:
        # one append per span instead of one per column; tables() turns them into columns
        self._span_promoted: list[list] = []
        self._span_attrs = _Maps()
        self._span_res = _Resources()
        self._ev_cols: dict[str, list] = {n: [] for n in SPAN_EVENTS_SCHEMA.names if n != "attributes"}
        self._ev_cols[PARTITION_TIME] = []
        self._ev_attrs = _Maps()
        self._ln_cols: dict[str, list] = {n: [] for n in SPAN_LINKS_SCHEMA.names if n != "attributes"}
        self._ln_cols[PARTITION_TIME] = []
        self._ln_attrs = _Maps()
        # the row of the span each event / link belongs to, for tables(keep=...)
        self._ev_span_row: list[int] = []
        self._ln_span_row: list[int] = []
        self.rejected = 0
        self.reject_reasons: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._span_cols["trace_id"])

    def span_keys(self) -> tuple[list[str], list[str]]:
        """The buffered spans' trace_id and span_id lists (hex), in row order."""
        return self._span_cols["trace_id"], self._span_cols["span_id"]

    def reject(self, reason: str) -> None:
        # a reason can quote the bad value (float() quotes all of it): one 20 MB string per
        # rejected span in a partial-success response, and in the collector's counters for good
        if len(reason) > 300:
            reason = reason[:300] + "…"
        # counted after the only call: a Ctrl-C at that call leaves the span uncounted (held)
        count = self.reject_reasons.get(reason, 0) + 1
        self.reject_reasons[reason] = count
        self.rejected += 1

    def _attrs_into(self, maps: _Maps, attributes: Iterable[tuple[str, Any]], promoted: list | None) -> int:
        """Append attributes to ``maps``; return how many were dropped by the limits or as a
        repeated key."""
        limits = self.limits
        max_attributes, max_key, max_value = limits.max_attributes, limits.max_key_chars, limits.max_value_chars
        keys, values = maps.keys, maps.values
        add_key, add_value = keys.append, values.append
        first = len(keys)
        n = 0
        dropped = 0
        for key, value in attributes:
            if promoted is not None:
                target = _PROMOTED.get(key)
                if target is not None:
                    i, t = target
                    if promoted[i] is None and (
                        (t == "string" and isinstance(value, str))
                        or (t == "int64" and isinstance(value, int) and not isinstance(value, bool)
                            and -INT64_MAX - 1 <= value <= INT64_MAX)
                        or (t == "double" and isinstance(value, float))
                    ):
                        if t == "string" and len(value) > max_value:
                            value = value[:max_value] + TRUNCATION_MARK
                        promoted[i] = value
                        continue
            if n >= max_attributes or len(key) > max_key:
                dropped += 1
                continue
            s = value if type(value) is str else stringify(value)
            if s is not None and len(s) > max_value:
                s = s[:max_value] + TRUNCATION_MARK
            add_key(key)
            add_value(s)
            n += 1
        if n > 1 and len(set(keys[first:])) != n:
            dropped += _keep_first_of_each_key(keys, values, first)
        maps.offsets.append(len(keys))
        return dropped

    def add_plain(self, rows: PlainRows) -> None:
        """Append spans a fast reader has turned into rows (see :class:`PlainRows`): the
        batch entry of the row builder, with no Python call per span or attribute."""
        if not rows.spans:
            return
        base = len(self)
        *columns, resources, promoted, counts = zip(*rows.spans)
        cols = self._span_cols
        for name, values in zip(PLAIN_SPAN, columns):
            cols[name].extend(values)
        cols["service_name"].extend([r.service_name for r in resources])
        for r in resources:
            self._span_res.add(r)
        self._span_promoted.extend(promoted)
        _extend_maps(self._span_attrs, counts, rows.attr_keys, rows.attr_values)
        trace_ids, span_ids, starts = columns[0], columns[1], columns[6]
        for table, cols, span_rows, maps, items, keys, values in (
                (PLAIN_EVENT, self._ev_cols, self._ev_span_row, self._ev_attrs, rows.events, rows.ev_attr_keys,
                 rows.ev_attr_values),
                (PLAIN_LINK, self._ln_cols, self._ln_span_row, self._ln_attrs, rows.links, rows.ln_attr_keys,
                 rows.ln_attr_values)):
            if not items:
                continue
            of_span, *columns, counts = zip(*items)
            cols["trace_id"].extend([trace_ids[i] for i in of_span])
            cols["span_id"].extend([span_ids[i] for i in of_span])
            for name, values_ in zip(table[1:], columns):
                cols[name].extend(values_)
            cols[PARTITION_TIME].extend([starts[i] for i in of_span])
            span_rows.extend([base + i for i in of_span])
            _extend_maps(maps, counts, keys, values)

    def add_span(
        self,
        *,
        trace_id: str,
        span_id: str,
        parent_span_id: str | None,
        name: str,
        kind: int,
        start_time_unix_nano: int,
        end_time_unix_nano: int,
        status_code: int,
        status_message: str | None,
        trace_state: str | None,
        scope_name: str | None,
        scope_version: str | None,
        resource: Resource,
        attributes: Iterable[tuple[str, Any]],
        events: Iterable[tuple[int, str, Iterable[tuple[str, Any]], int]] = (),
        links: Iterable[tuple[str, str, str | None, Iterable[tuple[str, Any]], int]] = (),
        dropped_attributes_count: int = 0,
        dropped_events_count: int = 0,
        dropped_links_count: int = 0,
    ) -> bool:
        """Validate one span and append it; on a bad span, count the reason and return False.

        Ids are hex strings (any case). ``events`` are (time, name, attributes, dropped);
        ``links`` are (trace_id, span_id, trace_state, attributes, dropped).
        """
        try:
            trace_id = _check_hex_id(trace_id, 32, "trace_id")
            span_id = _check_hex_id(span_id, 16, "span_id")
            parent_span_id = _check_hex_id(parent_span_id or "", 16, "parent_span_id", optional=True)
            if not 0 < start_time_unix_nano <= INT64_MAX:
                raise SpanRejected("start_time_unix_nano must be a positive int64 nanosecond timestamp")
            if not 0 < end_time_unix_nano <= INT64_MAX:
                raise SpanRejected("end_time_unix_nano must be a positive int64 nanosecond timestamp")
            if end_time_unix_nano < start_time_unix_nano:
                raise SpanRejected("end_time_unix_nano is before start_time_unix_nano")
            if not 0 <= kind <= 5:
                raise SpanRejected(f"kind {kind} is not a SpanKind (0-5)")
            if not 0 <= status_code <= 2:
                raise SpanRejected(f"status.code {status_code} is not a StatusCode (0-2)")
            events = list(events)
            links = list(links)
            # checked before anything is appended: a number where a string belongs (JSON
            # "message": 5) failed in the middle of the appends, or in tables(), and took the
            # whole request with it
            for what, v in (("name", name), ("status.message", status_message), ("traceState", trace_state),
                            ("scope.name", scope_name), ("scope.version", scope_version)):
                if v is not None and type(v) is not str and not isinstance(v, str):
                    raise SpanRejected(f"{what} must be a string, got {type(v).__name__}")
            if links:
                for l in links:
                    if l[2] is not None and not isinstance(l[2], str):
                        raise SpanRejected(f"link traceState must be a string, got {type(l[2]).__name__}")
                # a link to a malformed span context links to nothing: dropped and counted, the
                # span itself is fine
                good = [l for l in links if _is_hex_id(l[0], 32) and _is_hex_id(l[1], 16)]
                dropped_links_count += len(links) - len(good)
                links = good
        except SpanRejected as e:
            self.reject(str(e))
            return False
        except (TypeError, ValueError) as e:
            self.reject(f"malformed span: {e}")
            return False

        n = len(self)
        try:
            self._append(trace_id, span_id, parent_span_id, name, kind, start_time_unix_nano, end_time_unix_nano,
                         status_code, status_message, trace_state, scope_name, scope_version, resource, attributes,
                         events, links, dropped_attributes_count, dropped_events_count, dropped_links_count)
        except BaseException as e:
            # a value whose text cannot be read (an object of other code whose __str__ fails)
            # is found while the span's rows are appended: without taking them back they became
            # the next span's, and the exception lost the caller's whole batch. Anything but an
            # Exception (Ctrl-C, an exit) is taken back too, so the columns still line up, and
            # raised: the caller decides what becomes of the span
            while True:  # idempotent: a Ctrl-C landing in it truncates again
                try:
                    self._truncate(n)
                    break
                except KeyboardInterrupt as again:
                    e = again
            if not isinstance(e, Exception):
                raise e
            self.reject(f"unreadable span: {type(e).__name__}: {str(e)[:200]}")
            return False
        return True

    def _append(self, trace_id, span_id, parent_span_id, name, kind, start_time_unix_nano, end_time_unix_nano,
                status_code, status_message, trace_state, scope_name, scope_version, resource, attributes,
                events, links, dropped_attributes_count, dropped_events_count, dropped_links_count) -> None:
        """The rows of a span add_span has validated."""
        limits = self.limits
        cols = self._span_cols
        promoted = [None] * len(_PROMOTED_COLUMNS)  # no promoted value is None
        dropped = self._attrs_into(self._span_attrs, attributes, promoted)
        cols["trace_id"].append(trace_id)
        cols["span_id"].append(span_id)
        cols["parent_span_id"].append(parent_span_id)
        cols["trace_state"].append(trace_state or None)
        cols["name"].append(_limit(name, limits) or "")
        cols["kind"].append(kind)
        cols["start_time_unix_nano"].append(start_time_unix_nano)
        cols["duration_ns"].append(end_time_unix_nano - start_time_unix_nano)
        cols["status_code"].append(status_code)
        cols["status_message"].append(_limit(status_message, limits) or None)
        cols["service_name"].append(resource.service_name)
        cols["scope_name"].append(scope_name or None)
        cols["scope_version"].append(scope_version or None)
        self._span_promoted.append(promoted)
        self._span_res.add(resource)

        if len(events) > limits.max_events:
            dropped_events_count += len(events) - limits.max_events
            events = events[: limits.max_events]
        ev = self._ev_cols
        ev_rows, row = self._ev_span_row, len(cols["trace_id"]) - 1
        for time_unix_nano, ev_name, ev_attrs, ev_dropped in events:
            ev_dropped += self._attrs_into(self._ev_attrs, ev_attrs, None)
            ev["trace_id"].append(trace_id)
            ev["span_id"].append(span_id)
            ev["time_unix_nano"].append(min(max(int(time_unix_nano), 0), INT64_MAX))
            ev["name"].append(_limit(ev_name, limits) or "")
            ev["dropped_attributes_count"].append(_count(ev_dropped))
            ev[PARTITION_TIME].append(start_time_unix_nano)
            ev_rows.append(row)

        if len(links) > limits.max_links:
            dropped_links_count += len(links) - limits.max_links
            links = links[: limits.max_links]
        ln = self._ln_cols
        ln_rows, row = self._ln_span_row, len(cols["trace_id"]) - 1
        for l_trace, l_span, l_state, l_attrs, l_dropped in links:
            l_dropped += self._attrs_into(self._ln_attrs, l_attrs, None)
            ln["trace_id"].append(trace_id)
            ln["span_id"].append(span_id)
            ln["linked_trace_id"].append((l_trace or "").lower())
            ln["linked_span_id"].append((l_span or "").lower())
            ln["trace_state"].append(l_state or None)
            ln["dropped_attributes_count"].append(_count(l_dropped))
            ln[PARTITION_TIME].append(start_time_unix_nano)
            ln_rows.append(row)

        cols["dropped_attributes_count"].append(_count(dropped_attributes_count + dropped))
        cols["dropped_events_count"].append(_count(dropped_events_count))
        cols["dropped_links_count"].append(_count(dropped_links_count))

    def _truncate(self, n: int) -> None:
        """Drop everything appended for spans from row ``n`` on (their events and links too)."""
        for lst in self._span_cols.values():
            del lst[n:]
        del self._span_promoted[n:]
        del self._span_res.rows[n:]
        maps = self._span_attrs
        del maps.offsets[n + 1:]
        del maps.keys[maps.offsets[-1]:], maps.values[maps.offsets[-1]:]
        for cols, rows, maps in ((self._ev_cols, self._ev_span_row, self._ev_attrs),
                                 (self._ln_cols, self._ln_span_row, self._ln_attrs)):
            k = len(rows)
            while k and rows[k - 1] >= n:
                k -= 1
            del rows[k:]
            for lst in cols.values():
                del lst[k:]
            del maps.offsets[k + 1:]
            del maps.keys[maps.offsets[-1]:], maps.values[maps.offsets[-1]:]

    def _promoted_columns(self) -> dict[str, list]:
        if not self._span_promoted:
            return {col: [] for col in _PROMOTED_COLUMNS}
        return dict(zip(_PROMOTED_COLUMNS, zip(*self._span_promoted)))

    def tables(self, keep: list[bool] | None = None) -> dict[str, pa.Table]:
        """The buffered rows as Arrow tables (unsorted; the writer sorts).

        ``keep``, one flag per span in row order, leaves out the other spans with their own
        events and links (by row, not by id: a span that came twice keeps one copy's)."""
        out = {}
        mask = pa.array(keep, pa.bool_()) if keep is not None else None
        for table, schema, cols, maps, span_rows in (
            ("spans", SPANS_SCHEMA, {**self._span_cols, **self._promoted_columns()},
             {"attributes": self._span_attrs, "resource_attributes": self._span_res}, None),
            ("span_events", SPAN_EVENTS_SCHEMA, self._ev_cols, {"attributes": self._ev_attrs}, self._ev_span_row),
            ("span_links", SPAN_LINKS_SCHEMA, self._ln_cols, {"attributes": self._ln_attrs}, self._ln_span_row),
        ):
            if not cols["trace_id"]:
                # most batches have no links and many no events: converting a table's empty
                # columns one by one cost a small request more than its spans did
                out[table] = EMPTY_TABLES[table]
                continue
            arrays = []
            for f in schema:
                if f.name in maps:
                    arrays.append(maps[f.name].array())
                elif pa.types.is_string(f.type):
                    arrays.append(_safe_string_array(cols[f.name]))
                else:
                    arrays.append(pa.array(cols[f.name], f.type))
            t = pa.Table.from_arrays(arrays, schema=schema)
            if PARTITION_TIME in cols:
                t = t.append_column(PARTITION_TIME, pa.array(cols[PARTITION_TIME], pa.int64()))
            if mask is not None and t.num_rows:
                t = t.filter(mask if span_rows is None else mask.take(pa.array(span_rows, pa.int64())))
            out[table] = t
        return out


