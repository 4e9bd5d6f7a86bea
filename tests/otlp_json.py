"""OTLP/JSON of SDK spans, as the spec writes it, for tests that feed the receiver or the
importer JSON: the SDK's own protobuf encoding, turned into JSON by protobuf's mapping with
integer enums, and the ids written as hex (protobuf's generic mapping writes bytes as base64,
which the OTLP/JSON spec replaces by hex for trace and span ids).

Not the `opentelemetry-exporter-otlp-json-common` package: every version of it requires
opentelemetry-sdk>=1.42, so tests that used it could not run on the lowest SDK we support.
"""

from __future__ import annotations

import base64
from typing import Any, Sequence

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

_ID_KEYS = {"traceId", "spanId", "parentSpanId"}


def _hex_ids(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: (base64.b64decode(x).hex() if k in _ID_KEYS and isinstance(x, str) else _hex_ids(x))
                for k, x in v.items()}
    if isinstance(v, list):
        return [_hex_ids(x) for x in v]
    return v


def otlp_json(spans: Sequence) -> dict:
    """An ExportTraceServiceRequest of ``spans`` (SDK ReadableSpans) as an OTLP/JSON dict."""
    return _hex_ids(MessageToDict(encode_spans(spans), use_integers_for_enums=True))
