"""Build small span lakes for tests with the collector's own code path (SpanBatch + Lake)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from otel_assay.lake.files import Lake
from otel_assay.collect.otlp import add_json
from otel_assay.lake.rows import SpanBatch, make_resource

T0 = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z
MS = 1_000_000


def tid(n: int) -> str:
    return f"{n:032x}"


def sid(n: int) -> str:
    return f"{n:016x}"


def span(trace: int, span_id: int, parent: int | None, name: str, start_ms: float, end_ms: float,
         attrs: dict[str, Any] | None = None, *, scope: str | None = "otel_assay", status: int = 0,
         status_message: str | None = None, resource: dict[str, Any] | None = None,
         events: list | None = None) -> dict:
    """One span as keyword arguments of SpanBatch.add_span (ids given as small ints)."""
    return dict(
        trace_id=tid(trace), span_id=sid(span_id), parent_span_id=sid(parent) if parent else None,
        name=name, kind=0, start_time_unix_nano=T0 + int(start_ms * MS), end_time_unix_nano=T0 + int(end_ms * MS),
        status_code=status, status_message=status_message, trace_state=None, scope_name=scope, scope_version=None,
        resource=make_resource(list((resource or {"service.name": "test"}).items())),
        attributes=list((attrs or {}).items()), events=events or [],
    )


def write_lake(root: Path, spans: Iterable[dict], *, token: str | None = None) -> Path:
    """Write spans to the lake at ``root`` (one call = one file per dt partition)."""
    batch = SpanBatch()
    for s in spans:
        assert batch.add_span(**s), batch.reject_reasons
    lake = Lake(root)
    lake.ensure_writable()
    lake.write(batch.tables(), token=token)
    return root


def write_otlp_json(root: Path, *paths: Path) -> Path:
    """Load recorded OTLP/JSON documents (one document or one request per line) into a lake."""
    batch = SpanBatch()
    for p in paths:
        text = Path(p).read_text()
        docs = [json.loads(line) for line in text.splitlines() if line.strip()] if "\n{" in text.strip() else [json.loads(text)]
        for doc in docs:
            add_json(doc, batch)
    assert batch.rejected == 0, batch.reject_reasons
    lake = Lake(root)
    lake.ensure_writable()
    lake.write(batch.tables())
    return root
