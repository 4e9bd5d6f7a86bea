"""``otel_assay.step``: record a step of a hand-written agent (decorator or context manager).

>>> @otel_assay.step(kind="tool")
... def lookup_order(order_id: str) -> dict: ...          # execute_tool lookup_order, args + result
>>> @otel_assay.step(kind="llm", model="gpt-4o-mini", provider="openai")
... def call_model(messages): ...                          # chat gpt-4o-mini
>>> with otel_assay.step("triage", kind="agent"):          # invoke_agent triage
...     with otel_assay.step("search", kind="tool", arguments={"q": "x"}) as s:
...         s.result(search("x"))
>>> wrapped = otel_assay.step(kind="tool", name="db")(some_callable)   # any callable

Kinds and the spans they emit (DESIGN §2): ``llm`` -> ``chat {model}``; ``tool`` ->
``execute_tool {name}``; ``agent`` -> ``invoke_agent {name}``; ``workflow`` ->
``invoke_workflow {name}``; ``reason`` (alias ``plan``) -> ``plan {name}``; ``respond`` ->
``respond {name}``; ``other`` -> ``{name}``. Every span carries ``assay.step.kind``.
An exception marks the step ERROR (``error.type`` + exception event) and propagates.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import semconv
from . import _runtime
from ._spans import CLIENT, INTERNAL, args_json, clean, fail, result_text

KINDS = ("llm", "tool", "agent", "workflow", "reason", "respond", "other")


def _span_spec(kind: str, name: str, model: str | None, provider: str | None) -> tuple[str, dict, Any]:
    if kind == "llm":
        m = model or name
        return f"chat {m}", {semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT, semconv.GEN_AI_REQUEST_MODEL: model,
                             semconv.GEN_AI_PROVIDER_NAME: provider}, CLIENT
    if kind == "tool":
        return f"execute_tool {name}", {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
                                        semconv.GEN_AI_TOOL_NAME: name, semconv.GEN_AI_TOOL_TYPE: "function"}, INTERNAL
    if kind == "agent":
        return f"invoke_agent {name}", {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
                                        semconv.GEN_AI_AGENT_NAME: name}, INTERNAL
    if kind == "workflow":
        return f"invoke_workflow {name}", {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_WORKFLOW,
                                           semconv.GEN_AI_WORKFLOW_NAME: name}, INTERNAL
    if kind == "reason":
        return f"plan {name}", {semconv.GEN_AI_OPERATION_NAME: semconv.OP_PLAN}, INTERNAL
    if kind == "respond":
        return f"respond {name}", {}, INTERNAL
    return name, {}, INTERNAL


class Step:
    """A step in progress (what ``with otel_assay.step(...) as s`` gives)."""

    def __init__(self, name: str, kind: str = "other", *, model: str | None = None, provider: str | None = None,
                 agent: str | None = None, call_id: str | None = None, arguments: Any = None,
                 attributes: dict[str, Any] | None = None):
        kind = "reason" if kind == "plan" else kind
        if kind not in KINDS:
            raise ValueError(f"otel_assay.step: kind must be one of {', '.join(KINDS)}, not {kind!r}")
        self.name, self.kind, self.model, self.provider = name, kind, model, provider
        self.agent, self.call_id, self.arguments, self.extra = agent, call_id, arguments, attributes
        self.span: trace.Span | None = None
        self._token = None

    # -- recording helpers
    def result(self, value: Any) -> Any:
        """Record the step's result (tool result or model output text); returns it."""
        if self.span is not None and _runtime.capture_content():
            if self.kind == "tool":
                self.span.set_attribute(semconv.GEN_AI_TOOL_CALL_RESULT, result_text(value))
            else:
                self.span.set_attribute(semconv.GEN_AI_OUTPUT_MESSAGES, result_text(
                    [{"role": "assistant", "parts": [{"type": "text", "content": result_text(value)}]}]))
        return value

    def usage(self, input_tokens: int | None = None, output_tokens: int | None = None, *,
              response_model: str | None = None, finish_reasons: list[str] | None = None) -> None:
        if self.span is None:
            return
        self.span.set_attributes(clean({
            semconv.GEN_AI_USAGE_INPUT_TOKENS: input_tokens, semconv.GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
            semconv.GEN_AI_RESPONSE_MODEL: response_model, semconv.GEN_AI_RESPONSE_FINISH_REASONS: finish_reasons}))

    def set_attribute(self, key: str, value: Any) -> None:
        if self.span is not None:
            self.span.set_attributes(clean({key: value}))

    # -- lifecycle
    def __enter__(self) -> "Step":
        name, attrs, span_kind = _span_spec(self.kind, self.name, self.model, self.provider)
        attrs[semconv.ASSAY_STEP_KIND] = self.kind
        if self.agent and self.kind != "agent":
            attrs[semconv.GEN_AI_AGENT_NAME] = self.agent
        if self.kind == "tool":
            attrs[semconv.GEN_AI_TOOL_CALL_ID] = self.call_id
            if self.arguments is not None and _runtime.capture_content():
                attrs[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = args_json(self.arguments)
        if self.extra:
            attrs.update(self.extra)
        self.span = _runtime.tracer().start_span(name, kind=span_kind, attributes=clean(attrs))
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc is not None:
                fail(self.span, exc)
            else:
                self.span.end()
        finally:
            otel_context.detach(self._token)
        return False

    async def __aenter__(self) -> "Step":
        return self.__enter__()

    async def __aexit__(self, *exc) -> bool:
        return self.__exit__(*exc)


class step:
    """Decorator / context manager factory; see the module docstring."""

    def __init__(self, name: str | Callable | None = None, *, kind: str = "other", model: str | None = None,
                 provider: str | None = None, agent: str | None = None, call_id: str | None = None,
                 arguments: Any = None, attributes: dict[str, Any] | None = None):
        self._fn = None
        if callable(name):  # bare @otel_assay.step
            self._fn, name = name, None
        self.name, self.kind = name, kind
        self.kw = dict(model=model, provider=provider, agent=agent, call_id=call_id, arguments=arguments,
                       attributes=attributes)
        if self._fn is not None:
            self._wrapped = self(self._fn)

    def _make(self, name: str, arguments: Any = None) -> Step:
        kw = dict(self.kw)
        if arguments is not None:
            kw["arguments"] = arguments
        return Step(name, self.kind, **kw)

    # context manager
    def __enter__(self) -> Step:
        if self.name is None:
            raise TypeError("otel_assay.step used as a context manager needs a name")
        self._cm = self._make(self.name)
        return self._cm.__enter__()

    def __exit__(self, *exc) -> bool:
        return self._cm.__exit__(*exc)

    async def __aenter__(self) -> Step:
        return self.__enter__()

    async def __aexit__(self, *exc) -> bool:
        return self.__exit__(*exc)

    # decorator
    def __call__(self, *args, **kwargs):
        if self._fn is not None:
            return self._wrapped(*args, **kwargs)
        (fn,) = args
        name = self.name or getattr(fn, "__name__", type(fn).__name__)
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        is_tool = self.kind == "tool"

        def bound_args(a, k):
            if not is_tool or sig is None:
                return None
            try:
                b = sig.bind(*a, **k)
                b.apply_defaults()
                return {kk: v for kk, v in b.arguments.items() if kk not in ("self", "cls")}
            except TypeError:
                return None

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def awrapper(*a, **k):
                with self._make(name, bound_args(a, k)) as s:
                    out = await fn(*a, **k)
                    if is_tool:
                        s.result(out)
                    return out
            return awrapper

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with self._make(name, bound_args(a, k)) as s:
                out = fn(*a, **k)
                if is_tool:
                    s.result(out)
                return out
        return wrapper
