"""Canonical JSON for tool arguments, so that one call reads the same whoever recorded it.

Emitters record one call's arguments in different shapes: a JSON string
``{"a": 2, "b": 3}``, a Python-repr string ``{'a': 2, 'b': 3}`` (CrewAI's finished
event, LangChain's ``input_str``), or wrapped by the instrumentation (Traceloop's
``{"inputs": {...}, "tags": [...], "metadata": {...}}`` or ``{"input_str": "..."}``). The
canonical form is compact JSON with sorted keys, so equal arguments compare equal as
strings in SQL (stability's redundancy, coverage's boundaries).
"""

from __future__ import annotations

import ast
import json
from typing import Any

import pyarrow as pa

# keys of the wrapper LangChain callbacks (and so Traceloop) put around a tool's input
_WRAPPER_KEYS = {"inputs", "input_str", "tags", "metadata", "kwargs", "run_id", "parent_run_id",
                 "tool_call_id", "name", "callbacks"}


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:  # nested deeper than the parser goes: hostile, kept as text
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return text


def _unwrap(value: Any) -> Any:
    for _ in range(4):  # wrappers nest at most a few levels; a bound keeps hostile input cheap
        if isinstance(value, str):
            stripped = value.strip()
            if stripped[:1] in ("{", "[", '"'):
                parsed = _parse(stripped)
                if parsed is not stripped:
                    value = parsed
                    continue
            return value
        if isinstance(value, dict) and ("inputs" in value or "input_str" in value) and set(value) <= _WRAPPER_KEYS:
            inner = value.get("inputs")
            value = inner if inner not in (None, {}, "") else value.get("input_str")
            continue
        return value
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if isinstance(value, float):
        if value != value:
            return None
        # 1 and 1.0 are one JSON number (and one value to a JSON Schema "integer"); emitters
        # differ in which they write, and equal calls must compare equal
        if value.is_integer() and abs(value) < 2 ** 53:
            return int(value)
    if isinstance(value, complex):
        return str(value)
    return value


def canonical_json(raw: str | None) -> str | None:
    """The canonical JSON text of a recorded tool-argument value (None stays None)."""
    if raw is None:
        return None
    value = _unwrap(raw)
    try:
        return json.dumps(_jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return json.dumps(str(raw), ensure_ascii=False)


def canonical_json_arrow(raw: pa.Array) -> pa.Array:
    """Vectorised form registered as the DuckDB function ``canonical_json``."""
    return pa.array([canonical_json(v) for v in raw.to_pylist()], pa.string())
