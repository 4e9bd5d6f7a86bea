"""The span lake's tables: their Arrow schemas, how their columns are encoded, and the
per-span limits every writer applies.

One row per span (``spans``), one per span event (``span_events``), one per link
(``span_links``). Hot GenAI and ``assay.*`` keys get typed columns
(``semconv.PROMOTED_SPAN_ATTRIBUTES``); every other attribute lives in a
``MAP<VARCHAR, VARCHAR>`` with its value turned into a string (see ``rows.stringify``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from .. import semconv

SCHEMA_VERSION = "1"
SCHEMA_METADATA = {b"otel_assay.schema_version": SCHEMA_VERSION.encode()}

STRING_MAP = pa.map_(pa.string(), pa.string())

_PROMOTED_TYPES = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64()}

SPANS_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("trace_state", pa.string()),
        ("name", pa.string()),
        ("kind", pa.int8()),
        ("start_time_unix_nano", pa.int64()),
        ("duration_ns", pa.int64()),
        ("status_code", pa.int8()),
        ("status_message", pa.string()),
        ("service_name", pa.string()),
        ("scope_name", pa.string()),
        ("scope_version", pa.string()),
    ]
    + [(col, _PROMOTED_TYPES[t]) for col, _key, t in semconv.PROMOTED_SPAN_ATTRIBUTES]
    + [
        ("attributes", STRING_MAP),
        ("resource_attributes", STRING_MAP),
        ("dropped_attributes_count", pa.int32()),
        ("dropped_events_count", pa.int32()),
        ("dropped_links_count", pa.int32()),
    ],
    metadata=SCHEMA_METADATA,
)

SPAN_EVENTS_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("time_unix_nano", pa.int64()),
        ("name", pa.string()),
        ("attributes", STRING_MAP),
        ("dropped_attributes_count", pa.int32()),
    ],
    metadata=SCHEMA_METADATA,
)

SPAN_LINKS_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("linked_trace_id", pa.string()),
        ("linked_span_id", pa.string()),
        ("trace_state", pa.string()),
        ("attributes", STRING_MAP),
        ("dropped_attributes_count", pa.int32()),
    ],
    metadata=SCHEMA_METADATA,
)

TABLES = {"spans": SPANS_SCHEMA, "span_events": SPAN_EVENTS_SCHEMA, "span_links": SPAN_LINKS_SCHEMA}

# Time columns sort and delta-encode well; span ids are (nearly) unique, so a dictionary of
# them is as large as the column and costs time to build: both are stored plain. Everything
# else is dictionary-encoded.
DELTA_COLUMNS = {"start_time_unix_nano", "duration_ns", "time_unix_nano"}
PLAIN_COLUMNS = {"span_id", "parent_span_id"}

INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1


# Events and links are partitioned by their span's start time, carried in this column
# while rows are buffered and dropped by the writer.
PARTITION_TIME = "_span_start_time_unix_nano"
EMPTY_TABLES = {
    "spans": SPANS_SCHEMA.empty_table(),
    "span_events": SPAN_EVENTS_SCHEMA.append(pa.field(PARTITION_TIME, pa.int64())).empty_table(),
    "span_links": SPAN_LINKS_SCHEMA.append(pa.field(PARTITION_TIME, pa.int64())).empty_table(),
}



@dataclass(frozen=True)
class Limits:
    """Per-span limits that keep one hostile span from exhausting memory or the lake.

    Values over ``max_value_chars`` are truncated and marked; attributes past
    ``max_attributes`` are dropped and counted in ``dropped_attributes_count`` (the same
    rule the OTel SDK applies with OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT).
    """

    max_attributes: int = 1024
    max_value_chars: int = 256 * 1024
    max_key_chars: int = 1024
    max_events: int = 1024
    max_links: int = 1024


DEFAULT_LIMITS = Limits()
TRUNCATION_MARK = "…[truncated by otel-assay]"
