"""``otel_assay.step``: record a step of a hand-written agent (decorator or context manager).

>>> @otel_assay.step(kind="tool")
... def lookup_order(order_id: str) -> dict: ...          # execute_tool lookup_order, args + result
>>> @otel_assay.step(kind="llm", model="gpt-4o-mini", provider="openai")
... def call_model(messages): ...                          # chat gpt-4o-mini
>>> with otel_assay.step("triage", kind="agent"):          # invoke_agent triage
...     with otel_assay.step("search", kind="tool", arguments={"q": "x"}) as s:
...         s.result(search("x"))
>>> wrapped = otel_assay.step(kind="tool", name="db")(some_callable)   # any callable

Kinds and the spans they emit: ``llm`` -> ``chat {model}``; ``tool`` ->
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
            self._end(exc)
        finally:
            otel_context.detach(self._token)
        return False

    def _end(self, exc: BaseException | None) -> None:
        if exc is not None and not isinstance(exc, GeneratorExit):  # GeneratorExit: the consumer stopped
            fail(self.span, exc)
        else:
            self.span.end()

    # a generator step: the span covers the whole iteration, and is the current span only
    # while the generator's own code runs (between two items the consumer's code runs, in the
    # consumer's context), so nothing stays attached across a yield
    def _current(self, fn, *a):
        token = otel_context.attach(trace.set_span_in_context(self.span))
        try:
            return fn(*a)
        finally:
            otel_context.detach(token)

    async def _acurrent(self, awaitable):
        token = otel_context.attach(trace.set_span_in_context(self.span))
        try:
            return await awaitable
        finally:
            otel_context.detach(token)

    def _open_detached(self) -> None:
        self.__enter__()
        otel_context.detach(self._token)

    def _iterate(self, gen):
        self._open_detached()
        try:
            item = self._current(next, gen)
            while True:
                try:
                    sent = yield item
                except GeneratorExit:
                    self._current(gen.close)
                    raise
                except BaseException as e:  # thrown in by the consumer
                    item = self._current(gen.throw, e)
                else:
                    item = self._current(gen.send, sent)
        except StopIteration as e:
            self._end(None)
            return e.value
        except BaseException as e:
            self._end(e)
            raise

    async def __aenter__(self) -> "Step":
        return self.__enter__()

    async def __aexit__(self, *exc) -> bool:
        return self.__exit__(*exc)


class step:
    """Decorator / context manager factory; see the module docstring."""

    def __new__(cls, name: str | Callable | None = None, **kw):
        if callable(name):  # bare @otel_assay.step: the wrapped function itself, as with arguments
            return cls(**kw)(name)
        return super().__new__(cls)

    def __init__(self, name: str | Callable | None = None, *, kind: str = "other", model: str | None = None,
                 provider: str | None = None, agent: str | None = None, call_id: str | None = None,
                 arguments: Any = None, attributes: dict[str, Any] | None = None):
        self.name, self.kind = name, kind
        self.kw = dict(model=model, provider=provider, agent=agent, call_id=call_id, arguments=arguments,
                       attributes=attributes)
        self._open: list[Step] = []  # entered and not exited (one factory may be in use in several threads)

    def _make(self, name: str, arguments: Any = None) -> Step:
        kw = dict(self.kw)
        if arguments is not None:
            kw["arguments"] = arguments
        return Step(name, self.kind, **kw)

    # context manager
    def __enter__(self) -> Step:
        if self.name is None:
            raise TypeError("otel_assay.step used as a context manager needs a name")
        s = self._make(self.name).__enter__()
        self._open.append(s)
        return s

    def __exit__(self, *exc) -> bool:
        # this context's step is the innermost one open here: the current span
        current = trace.get_current_span()
        s = next((s for s in reversed(self._open) if s.span is current), None) or self._open[-1]
        self._open.remove(s)
        return s.__exit__(*exc)

    async def __aenter__(self) -> Step:
        return self.__enter__()

    async def __aexit__(self, *exc) -> bool:
        return self.__exit__(*exc)

    # decorator
    def __call__(self, fn):
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

        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gwrapper(*a, **k):
                return (yield from self._make(name, bound_args(a, k))._iterate(fn(*a, **k)))
            return gwrapper

        if inspect.isasyncgenfunction(fn):
            @functools.wraps(fn)
            async def agwrapper(*a, **k):  # as Step._iterate (an async generator cannot delegate)
                s = self._make(name, bound_args(a, k))
                s._open_detached()
                agen = fn(*a, **k)
                try:
                    item = await s._acurrent(agen.__anext__())
                    while True:
                        try:
                            sent = yield item
                        except GeneratorExit:
                            await s._acurrent(agen.aclose())
                            raise
                        except BaseException as e:
                            item = await s._acurrent(agen.athrow(e))
                        else:
                            item = await s._acurrent(agen.asend(sent))
                except StopAsyncIteration:
                    s._end(None)
                except BaseException as e:
                    s._end(e)
                    raise
            return agwrapper

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
