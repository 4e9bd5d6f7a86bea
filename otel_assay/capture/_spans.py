"""Small helpers every adapter uses to emit its spans: attribute cleaning, JSON, starting
and failing a span, through the OpenTelemetry API only."""

from __future__ import annotations

import json
import math
import time
from contextvars import ContextVar
from typing import Any, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .. import semconv
from . import _runtime

INTERNAL = SpanKind.INTERNAL
CLIENT = SpanKind.CLIENT


def _default(o: Any) -> Any:
    for attr in ("model_dump", "dict", "to_dict"):
        fn = getattr(o, attr, None)
        if callable(fn):
            try:
                return fn()
            except Exception:
                pass
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if isinstance(o, bytes):
        return o.decode("utf-8", "replace")
    return str(o)


# json.dumps with any option builds a new JSONEncoder per call, a third of a small
# message's cost; one encoder holds no state between calls (encode() makes its own)
_ENCODER = json.JSONEncoder(default=_default, ensure_ascii=False, sort_keys=True)


def to_json(obj: Any) -> str:
    """Canonical-ish JSON (sorted keys) for tool arguments, results and message lists.
    A string that already holds JSON is kept as it is."""
    if isinstance(obj, str):
        return obj
    try:
        return _ENCODER.encode(obj)
    except (TypeError, ValueError):
        return json.dumps(str(obj), ensure_ascii=False)


def args_json(obj: Any) -> str:
    """Tool arguments as JSON; a string holding JSON or a Python literal is parsed first so
    the same call always serialises the same way."""
    if isinstance(obj, str):
        s = obj.strip()
        if s[:1] in "{[":
            try:
                return to_json(json.loads(s))
            except ValueError:
                try:
                    import ast
                    return to_json(ast.literal_eval(s))
                except (ValueError, SyntaxError):
                    return obj
        return obj
    return to_json(obj)


def result_text(obj: Any) -> str:
    if obj is None:
        return ""
    if isinstance(obj, str):
        return obj
    return to_json(obj)


def error_type(exc: BaseException | type) -> str:
    cls = exc if isinstance(exc, type) else type(exc)
    mod = getattr(cls, "__module__", "builtins")
    return cls.__qualname__ if mod in ("builtins", "__main__") else f"{mod}.{cls.__qualname__}"


def clean(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``attrs`` as the SDK takes them: it refuses None, dicts, mixed lists and any other
    type (dropping the attribute with a warning), so None is left out and everything but
    str, bool, int, float and lists of str becomes JSON text. A non-finite float becomes its
    text ("nan", "inf"): JSON, which OTLP/JSON and the lake's attribute columns use, has no
    such number."""
    out = {}
    for k, v in attrs.items():
        if v is None:
            continue
        if isinstance(v, (str, bool, int)):
            out[k] = v
        elif isinstance(v, float):
            out[k] = v if math.isfinite(v) else repr(v)
        elif isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
            # plain str items: opentelemetry-sdk 1.30 drops a list holding a str subclass
            out[k] = [x if type(x) is str else str(x) for x in v]
        else:
            out[k] = to_json(v)
    return out


def start_span(name: str, attrs: Mapping[str, Any], *, kind: SpanKind = INTERNAL,
               parent: Any = None, start_time: int | None = None, links=None,
               tracer_name: str = "otel_assay") -> trace.Span:
    """Start a span with ``attrs`` cleaned. ``parent``: a Span, a Context, or None for the
    current context."""
    if parent is not None and not isinstance(parent, otel_context.Context):
        parent = trace.set_span_in_context(parent)
    return _runtime.tracer(tracer_name).start_span(
        name, context=parent, kind=kind, attributes=clean(attrs), start_time=start_time, links=links)


def chat_attributes(framework: str, model: Any, provider: Any, tool_defs=None, messages=None) -> dict[str, Any]:
    """The attributes a ``chat {model}`` span starts with. ``tool_defs`` and ``messages``
    are callables returning the GenAI JSON shapes, called only when needed: the tool
    definitions when there are tools, the input messages when content capture is on (a
    message list that cannot be encoded is left out rather than failing the call)."""
    attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT, semconv.GEN_AI_REQUEST_MODEL: model,
             semconv.GEN_AI_PROVIDER_NAME: provider, semconv.ASSAY_STEP_KIND: "llm",
             semconv.ASSAY_FRAMEWORK: framework}
    if tool_defs is not None:
        attrs[semconv.GEN_AI_TOOL_DEFINITIONS] = to_json(tool_defs())
    if messages is not None and _runtime.capture_content():
        try:
            attrs[semconv.GEN_AI_INPUT_MESSAGES] = to_json(messages())
        except Exception:
            pass
    return attrs


def fail(span: trace.Span, exc: BaseException | None = None, *, type_name: str | None = None,
         message: str | None = None, end_time: int | None = None, end: bool = True) -> None:
    """Mark a span as an error (status ERROR + error.type + exception event) and end it.

    Ctrl-C is no error of the step: someone stopped the run (the trial records it as
    interrupted), so the span keeps its status and is marked ``assay.incomplete``."""
    if isinstance(exc, KeyboardInterrupt):
        span.set_attribute(semconv.ASSAY_INCOMPLETE, "interrupted")
        span.record_exception(exc, timestamp=end_time)
        if end:
            span.end(end_time=end_time)
        return
    et = type_name or (error_type(exc) if exc is not None else "_OTHER")
    msg = message if message is not None else (str(exc) if exc is not None else "")
    span.set_attribute(semconv.ERROR_TYPE, et)
    if exc is not None:
        span.record_exception(exc, timestamp=end_time)
    else:
        span.add_event("exception", {"exception.type": et, "exception.message": msg}, timestamp=end_time)
    span.set_status(Status(StatusCode.ERROR, msg[:1024]))
    if end:
        span.end(end_time=end_time)


def text_parts(role: str, content: Any) -> dict[str, Any]:
    if isinstance(content, list):
        parts = []
        for c in content:
            if isinstance(c, dict) and c.get("type") == "text":
                parts.append({"type": "text", "content": c.get("text", "")})
            elif isinstance(c, str):
                parts.append({"type": "text", "content": c})
            else:
                parts.append({"type": "text", "content": to_json(c)})
        return {"role": role, "parts": parts}
    return {"role": role, "parts": [{"type": "text", "content": "" if content is None else str(content)}]}


def tool_call_part(call_id: Any, name: str, arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


class DeferredCall:
    """One wrapped model call, for adapters where model calls nest (a subclass calling
    ``super()``, a stream built on the plain call, a wrapper model around another): only
    the innermost call records, since it sees the model's own name, the messages as sent
    and the usage as returned, and a model asking again makes one call per attempt. A call
    that reached another (``delegated``) records nothing, so the adapter starts the span
    only when the call ends, with ``start`` and ``parent`` taken here (an OTel span cannot
    be dropped once started). ``current`` is the adapter's context variable holding the
    call in progress."""

    __slots__ = ("target", "messages", "kwargs", "start", "parent", "delegated")

    def __init__(self, current: ContextVar, target, args, kwargs):
        outer = current.get()
        if outer is not None:
            outer.delegated = True
        self.target, self.kwargs = target, kwargs
        self.messages = args[0] if args else kwargs.get("messages")
        self.start = time.time_ns()
        self.parent = otel_context.get_current()
        self.delegated = False
