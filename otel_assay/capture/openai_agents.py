"""OpenAI Agents SDK adapter: a ``TracingProcessor`` that turns the SDK's spans into OTel
spans in the trace of the current context (so inside a trial, in the trial's trace).

Registered with ``agents.add_trace_processor`` (the SDK's own processors, e.g. the upload
to OpenAI, stay). Mapping:

* an SDK trace -> ``invoke_workflow {trace name}`` (child of the current span);
* ``agent`` -> ``invoke_agent {name}``;
* ``generation`` / ``response`` -> ``chat {model}`` (CLIENT) with usage, finish reason,
  tool calls and messages. A ``response`` span (``OpenAIResponsesModel``, the SDK's default
  model) exports only its id and usage: the model, output and input are read from its
  ``Response`` object; a streamed Chat Completions ``generation`` records that same
  ``Response`` shape as its output;
* ``function`` -> ``execute_tool {name}`` with arguments, result and the call id (taken
  from the tool call of the generation that asked for it);
* ``handoff`` -> ``handoff {to_agent}`` (``assay.handoff.from_agent`` / ``to_agent``);
* ``guardrail`` -> ``guardrail {name}`` (``assay.guardrail.triggered``);
* ``task`` / ``turn`` (plumbing) get no span; other types keep their type as name.

SDK span errors become status ERROR + ``error.type`` + an exception event. A run fails its
workflow span (and an implicit trial) when it raises, also when a streamed run raises only to
the reader of its events (max turns, a late guardrail tripwire; see ``_streamed_error``); a
tool or model call cut off by a cancellation is failed (``CancelledError``); a streamed run
the caller stops with ``cancel()``, or stops reading (a ``break`` out of
``stream_events()``, see ``_reader_gone``), is not a failure: its workflow span is marked
``assay.incomplete=caller_stopped``. A span
whose SDK trace was opened outside the trial it starts in belongs to that trial (see
``_parent``). With the SDK's tracing disabled nothing starts here: a warning says so (see
``_warn_tracing_disabled``).

While a tool runs, its ``execute_tool`` span is the current OTel span, so the spans made in
the tool's code (``otel_assay.step``, another framework, other instrumentation) nest under
it rather than under the trial.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import sys
import threading
import weakref
from typing import Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import semconv
from . import _runtime
from ._spans import CLIENT, args_json, clean, fail, result_text, start_span, to_json, tool_call_part
from .trial import current_trial, implicit_trial

try:
    from agents import InputGuardrailTripwireTriggered, MaxTurnsExceeded, RunResultStreaming, add_trace_processor
    from agents.run import AgentRunner
    from agents.tracing import TraceProvider, get_trace_provider
    from agents.tracing.provider import DefaultTraceProvider
    from agents.tracing.traces import NoOpTrace
except ImportError:  # a package named "agents" that is not the OpenAI Agents SDK: see instrument()
    add_trace_processor = None

FRAMEWORK = "openai_agents"
_STRUCTURAL = {"task", "turn"}
# the SDK span id whose OTel span this context attached last (see _attach)
_ATTACHED: contextvars.ContextVar = contextvars.ContextVar("otel_assay_oa_attached", default=None)


def _data(span) -> dict:
    try:
        return span.span_data.export() or {}
    except Exception:
        return {}


def _kind(span, d) -> str:
    t = d.get("type") or getattr(span.span_data, "type", "custom")
    if t == "custom":
        sub = (d.get("data") or {}).get("sdk_span_type")
        if sub in _STRUCTURAL:
            return sub
    return t


def _text_parts(content) -> list:
    """A message's text, a string or a list of parts with ``text``, as GenAI text parts."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    if isinstance(content, list):
        return [{"type": "text", "content": p["text"]} for p in content if isinstance(p, dict) and p.get("text")]
    return []


def _chat_messages(msgs) -> list:
    out = []
    for m in msgs or []:
        if not isinstance(m, dict):
            continue
        role = m.get("role", "user")
        c = m.get("content")
        parts = _text_parts(c)
        for tc in m.get("tool_calls") or []:
            f = tc.get("function") or {}
            parts.append(tool_call_part(tc.get("id"), f.get("name"), f.get("arguments")))
        if role == "tool":
            parts = [{"type": "tool_call_response", "id": m.get("tool_call_id"), "result": c}]
        out.append({"role": role, "parts": parts})
    return out


def _sdk_dump(obj):
    """A pydantic object of the SDK (a ``Response``, an input item) as plain data."""
    if obj is None or isinstance(obj, (dict, list, str)):
        return obj
    try:
        return obj.model_dump(exclude_none=True)
    except Exception:
        return None


def _response_messages(items) -> list:
    """Responses-API items (a ``Response``'s output, or its input list) as GenAI messages."""
    if isinstance(items, str):
        return [{"role": "user", "parts": [{"type": "text", "content": items}]}]
    out = []
    for it in items or []:
        it = _sdk_dump(it)
        if not isinstance(it, dict):
            continue
        t = it.get("type")
        if t == "function_call":
            call = tool_call_part(it.get("call_id"), it.get("name"), it.get("arguments"))
            out.append({"role": "assistant", "parts": [call]})
        elif t == "function_call_output":
            out.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": it.get("call_id"),
                                                    "result": it.get("output")}]})
        elif t == "message" or (t is None and "role" in it):
            out.append({"role": it.get("role", "user"), "parts": _text_parts(it.get("content"))})
    return out


def _as_response(output):
    """The ``Response`` a generation recorded as its output (streamed Chat Completions do),
    else None."""
    if isinstance(output, list) and len(output) == 1 and isinstance(output[0], dict) \
            and output[0].get("object") == "response":
        return output[0]
    return None


class AssayTracingProcessor:
    """agents.tracing.TracingProcessor implementation (duck-typed, so this module imports
    without the SDK)."""

    def __init__(self) -> None:
        self._roots: dict[str, Any] = {}       # sdk trace id -> (otel span, implicit trial)
        self._spans: dict[str, Any] = {}       # sdk span id -> otel span (or parent's for plumbing)
        self._owned: set[str] = set()          # sdk span ids that own their otel span
        self._calls: dict[str, dict] = {}      # sdk trace id -> {(name, args json): [call ids]}
        self._attached: dict[str, tuple] = {}  # sdk span id -> tokens of the context it attached
        self._streamed: dict[str, Any] = {}    # sdk trace id -> weakref to its RunResultStreaming
        self._handled: dict[str, Any] = {}     # sdk span id -> exception being handled at its start
        self._lock = threading.Lock()
        self.enabled = True

    # -------------------------------------------------------------- traces
    def on_trace_start(self, tr) -> None:
        if not self.enabled:
            return
        name = getattr(tr, "name", None) or "Agent workflow"
        t = implicit_trial(name)
        span = start_span(f"invoke_workflow {name}", {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_WORKFLOW, semconv.GEN_AI_WORKFLOW_NAME: name,
            semconv.GEN_AI_CONVERSATION_ID: getattr(tr, "group_id", None),
            semconv.ASSAY_STEP_KIND: "workflow", semconv.ASSAY_FRAMEWORK: FRAMEWORK},
            parent=t.span if t else None)
        with self._lock:
            # with the exception being handled now, if any: see on_trace_end
            self._roots[tr.trace_id] = (span, t, sys.exc_info()[1])

    def on_trace_end(self, tr) -> None:
        with self._lock:
            root = self._roots.pop(tr.trace_id, None)
            self._calls.pop(tr.trace_id, None)
            streamed = self._streamed.pop(tr.trace_id, None)
        if root is not None:
            span, t, handled_before = root
            # an SDK trace has no error of its own, but the runner finishes it while the run's
            # exception propagates (Runner.run, run_sync, a streamed run whose loop raises): the
            # run failed, and so does an implicit trial (an exception the caller was already
            # handling when the run started is not the run's)
            exc = sys.exc_info()[1]
            caller_stopped = isinstance(exc, GeneratorExit)
            if exc is handled_before or caller_stopped:
                exc = None
            result = streamed() if streamed is not None else None
            if exc is None:
                exc = _streamed_error(result)
            elif type(exc).__name__ == "CancelledError" and (_cancelled_by_caller(result) or _reader_gone(result)):
                exc, caller_stopped = None, True
            if caller_stopped and exc is None:
                span.set_attribute(semconv.ASSAY_INCOMPLETE, "caller_stopped")
            if exc is not None:
                fail(span, exc)
            else:
                span.end()
            if t is not None:
                # a run its caller stopped did not complete: an implicit trial gets no verdict
                t.finish(exc, incomplete="caller_stopped" if caller_stopped and exc is None else None)

    # -------------------------------------------------------------- spans
    def _parent(self, s):
        with self._lock:
            if s.parent_id and s.parent_id in self._spans:
                parent = self._spans[s.parent_id]
            else:
                root = self._roots.get(s.trace_id)
                parent = root[0] if root else None
        if parent is not None:
            # an SDK trace opened outside the trial the span starts in (``with trace("eval"):``
            # around a loop of trials, as the SDK suggests to group runs): the span belongs to
            # the trial, a trace of its own, not to that outer trace, or every trial would be
            # an empty run and one trace outside them would hold all their steps
            t = current_trial()
            if t is not None and t.span is not None and \
                    parent.get_span_context().trace_id != t.span.get_span_context().trace_id:
                return None  # the current context: the trial, or a step inside it
        return parent

    def on_span_start(self, s) -> None:
        if not self.enabled:
            return
        d = _data(s)
        kind = _kind(s, d)
        parent = self._parent(s)
        if kind in _STRUCTURAL:
            with self._lock:
                self._spans[s.span_id] = parent
            return
        base = {semconv.ASSAY_FRAMEWORK: FRAMEWORK}
        if kind == "agent":
            name = d.get("name") or "agent"
            attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: name,
                     semconv.ASSAY_STEP_KIND: "agent"}
            if d.get("handoffs"):
                attrs["assay.agent.handoffs"] = [str(h) for h in d["handoffs"]]
            span = start_span(f"invoke_agent {name}", {**base, **attrs}, parent=parent)
        elif kind in ("generation", "response"):
            model = d.get("model") or ((d.get("response") or {}).get("model") if isinstance(d.get("response"), dict) else None)
            attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT, semconv.GEN_AI_REQUEST_MODEL: model,
                     semconv.GEN_AI_PROVIDER_NAME: "openai", semconv.ASSAY_STEP_KIND: "llm"}
            span = start_span(f"chat {model}" if model else "chat", {**base, **attrs}, kind=CLIENT, parent=parent)
        elif kind == "function":
            name = d.get("name") or "function"
            attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: name,
                     semconv.GEN_AI_TOOL_TYPE: "function", semconv.ASSAY_STEP_KIND: "tool"}
            span = start_span(f"execute_tool {name}", {**base, **attrs}, parent=parent)
        elif kind == "handoff":
            span = start_span(f"handoff {d.get('to_agent') or ''}".strip(), {
                **base, semconv.ASSAY_HANDOFF_FROM: d.get("from_agent"), semconv.ASSAY_HANDOFF_TO: d.get("to_agent"),
                semconv.ASSAY_STEP_KIND: "other"}, parent=parent)
        elif kind == "guardrail":
            span = start_span(f"guardrail {d.get('name')}", {
                **base, semconv.ASSAY_GUARDRAIL_NAME: d.get("name"), semconv.ASSAY_STEP_KIND: "other"}, parent=parent)
        else:
            name = d.get("name") if kind == "custom" else kind
            span = start_span(str(name or kind), {**base, semconv.ASSAY_STEP_KIND: "other", "assay.sdk.span_type": kind},
                              parent=parent)
        with self._lock:
            self._spans[s.span_id] = span
            self._owned.add(s.span_id)
            if kind in _CUT_OFF_KINDS:
                self._handled[s.span_id] = sys.exc_info()[1]  # see on_span_end
        if kind == "function":
            self._attach(s.span_id, span)

    # A function span starts and ends in the task that runs the tool (``with function_span``);
    # the tool's code runs there or in tasks and threads copied from it.
    def _attach(self, sdk_id, span) -> None:
        tokens = (otel_context.attach(trace.set_span_in_context(span)), _ATTACHED.set(sdk_id))
        with self._lock:
            self._attached[sdk_id] = tokens

    def _detach(self, sdk_id) -> None:
        with self._lock:
            tokens = self._attached.pop(sdk_id, None)
        # only in the context that attached it, and only while nothing attached later is still
        # attached there: a context token cannot be reset elsewhere or out of order
        if tokens is None or _ATTACHED.get() != sdk_id:
            return
        try:
            _ATTACHED.reset(tokens[1])
        except ValueError:  # a copy of that context (a task started inside the tool)
            return
        otel_context.detach(tokens[0])

    def on_span_end(self, s) -> None:
        with self._lock:
            span = self._spans.pop(s.span_id, None)
            owned = s.span_id in self._owned
            self._owned.discard(s.span_id)
            handled_before = self._handled.pop(s.span_id, None)
        if span is None or not owned:
            return
        self._detach(s.span_id)
        d = _data(s)
        kind = _kind(s, d)
        if kind == "response" and getattr(s.span_data, "response", None) is not None:
            # ResponseSpanData.export() leaves out the response and the input
            d = {**d, "response": _sdk_dump(s.span_data.response), "input": getattr(s.span_data, "input", None)}
        try:
            if kind in ("generation", "response"):
                self._end_generation(s, span, d, kind)
            elif kind == "function":
                self._end_function(s, span, d)
            elif kind == "handoff":
                span.set_attributes(clean({semconv.ASSAY_HANDOFF_TO: d.get("to_agent"),
                                           semconv.ASSAY_HANDOFF_FROM: d.get("from_agent")}))
                if d.get("to_agent") and span.name == "handoff":
                    span.update_name(f"handoff {d['to_agent']}")
            elif kind == "guardrail":
                span.set_attribute(semconv.ASSAY_GUARDRAIL_TRIGGERED, bool(d.get("triggered")))
        except Exception:
            pass
        err = getattr(s, "error", None)
        if err:
            data = err.get("data") or {}
            et = data.get("error_type") or data.get("type") or ("ToolError" if kind == "function" else "AgentsSDKError")
            fail(span, type_name=str(et), message=str(err.get("message", "")) +
                 (f": {data.get('error')}" if data.get("error") else ""))
        elif kind in _CUT_OFF_KINDS and _cancelled(handled_before):
            # a tool or model call cut off by a timeout or a cancelled run: the SDK ends its
            # span (``with function_span``) without an error, as if it had completed
            fail(span, sys.exc_info()[1])
        else:
            span.end()

    def _end_generation(self, s, span, d, kind) -> None:
        usage = d.get("usage") or {}
        output = d.get("output") or []
        model = d.get("model")
        resp = d.get("response") if isinstance(d.get("response"), dict) else _as_response(output)
        if resp:
            model = model or resp.get("model")
            usage = usage or resp.get("usage") or {}
            msgs = _response_messages(resp.get("output"))
        else:
            msgs = _chat_messages(output)
        attrs = {semconv.GEN_AI_USAGE_INPUT_TOKENS: usage.get("input_tokens", usage.get("prompt_tokens")),
                 semconv.GEN_AI_USAGE_OUTPUT_TOKENS: usage.get("output_tokens", usage.get("completion_tokens")),
                 semconv.GEN_AI_RESPONSE_MODEL: model}
        if model and span.name == "chat":
            attrs[semconv.GEN_AI_REQUEST_MODEL] = model
            span.update_name(f"chat {model}")
        calls = [p for m in msgs for p in m["parts"] if p.get("type") == "tool_call"]
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = ["tool_calls" if calls else "stop"]
        cfg = d.get("model_config") or {}
        tools = (cfg.get("tools") if isinstance(cfg, dict) else None) or (resp or {}).get("tools")
        if tools:
            attrs[semconv.GEN_AI_TOOL_DEFINITIONS] = to_json(tools)
        if calls:
            with self._lock:
                pending = self._calls.setdefault(s.trace_id, {})
                for c in calls:
                    pending.setdefault((c["name"], args_json(c["arguments"])), []).append(c["id"])
        if _runtime.capture_content():
            attrs[semconv.GEN_AI_OUTPUT_MESSAGES] = to_json(msgs)
            if d.get("input"):
                inp = _response_messages(d["input"]) if kind == "response" else _chat_messages(d["input"])
                if kind == "response" and isinstance((resp or {}).get("instructions"), str):
                    inp.insert(0, {"role": "system", "parts": [{"type": "text", "content": resp["instructions"]}]})
                attrs[semconv.GEN_AI_INPUT_MESSAGES] = to_json(inp)
        span.set_attributes(clean(attrs))

    def _end_function(self, s, span, d) -> None:
        name = d.get("name")
        args = d.get("input")
        key = (name, args_json(args)) if args is not None else None
        with self._lock:
            ids = self._calls.get(s.trace_id, {}).get(key) if key else None
            call_id = ids.pop(0) if ids else None
        attrs = {semconv.GEN_AI_TOOL_CALL_ID: call_id}
        if _runtime.capture_content():
            attrs[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = args_json(args) if args is not None else None
            attrs[semconv.GEN_AI_TOOL_CALL_RESULT] = result_text(d.get("output")) if d.get("output") is not None else None
        span.set_attributes(clean(attrs))

    def streamed(self, result) -> None:
        """``result`` (a ``RunResultStreaming``) runs the trace it carries: see on_trace_end."""
        tr = getattr(result, "trace", None)
        if self.enabled and tr is not None and getattr(tr, "trace_id", None) is not None:
            with self._lock:
                self._streamed[tr.trace_id] = weakref.ref(result)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


_CUT_OFF_KINDS = ("function", "generation", "response")


def _cancelled(handled_before) -> bool:
    """A cancellation propagates now (the span ends in the ``finally`` or ``with`` it cut
    short), other than one the code was already handling when the span started."""
    exc = sys.exc_info()[1]
    return isinstance(exc, asyncio.CancelledError) and exc is not handled_before


def _cancelled_by_caller(result) -> bool:
    """The caller stopped a streamed run with ``RunResultStreaming.cancel()`` (or the SDK did,
    for a reader cancelled while waiting for an event): its run loop ends by a CancelledError
    that is no failure of the run (as a stream the caller stops reading in the other
    adapters). ``cancel()`` marks the result complete before it cancels the loop; a run that
    completes by itself raises no CancelledError, so a complete result seen with one was
    cancelled."""
    return result is not None and result.is_complete is True


_WAITING = "_otel_assay_reader_waiting"  # set on a streamed result: see _stream_events


def _stream_events(wrapped, instance, args, kwargs):
    """``RunResultStreaming.stream_events()``, as its reader reads it: notes on the result
    whether the reader is waiting for the next event (see ``_reader_gone``)."""
    async def events():
        agen = wrapped(*args, **kwargs)
        try:
            while True:
                vars(instance)[_WAITING] = True
                try:
                    item = await agen.__anext__()
                except StopAsyncIteration:
                    return
                finally:
                    vars(instance)[_WAITING] = False
                yield item
        finally:
            await agen.aclose()
    return events()


def _reader_gone(result) -> bool:
    """The caller stopped reading a streamed run without ``cancel()``: a ``break`` out of
    ``stream_events()``, or its reading task stopped while handling an event. The SDK cancels
    the run itself only for a reader cancelled while waiting for the next event; otherwise
    the run goes on unread until something cancels it, usually ``asyncio.run`` cancelling the
    tasks left when its main coroutine returns. Its CancelledError arrives while no reader
    waits for an event (or none ever read: the caller left the run unread)."""
    return result is not None and not vars(result).get(_WAITING, False)


def _streamed_error(result) -> BaseException | None:
    """The error a streamed run ends with although its trace ends without one: the SDK
    raises it only later, to the caller reading ``stream_events``; without this its workflow
    span would be ok and an implicit trial passed. Read from the result's public state when
    the trace ends (the run loop is over by then), with the SDK's own tests:

    * an input guardrail whose tripwire triggered (a streamed run runs its input guardrails
      beside the model, and finishes the trace before their tripwire is raised);
    * a run past its max turns stops its loop normally; a max-turns error handler that
      answered sets the current turn back to the maximum."""
    if result is None:
        return None
    tripped = next((g for g in result.input_guardrail_results if g.output.tripwire_triggered), None)
    if tripped is not None:
        return InputGuardrailTripwireTriggered(tripped)
    if result.max_turns is not None and result.current_turn > result.max_turns:
        return MaxTurnsExceeded(f"Max turns ({result.max_turns}) exceeded")
    return None


def _run_streamed(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if _PROCESSOR is not None:
        try:
            _PROCESSOR.streamed(result)
        except Exception:  # never let recording break the run
            pass
    return result


_PROCESSOR: AssayTracingProcessor | None = None


_PROVIDER = None  # the SDK trace provider our processor was added to


def _set_processors(wrapped, instance, args, kwargs):
    # set_trace_processors([...]) replaces every processor (applications do it to drop the
    # SDK's upload to OpenAI): ours stays, as our OTel processors stay on an application's
    # provider; without it the runs would record no agent, LLM or tool step at all
    procs = list(args[0] if args else kwargs.get("processors") or [])
    if _PROCESSOR is not None and instance is _PROVIDER and _PROCESSOR not in procs:
        procs.append(_PROCESSOR)
    return wrapped(procs)


_WARNED_DISABLED = False


def _warn_tracing_disabled(how: str) -> None:
    """With the SDK's tracing disabled no SDK trace or span starts, so this processor sees
    nothing: every trial would be an empty run (left out of pass rates), silently. The SDK's
    docs suggest disabling it to stop the upload to OpenAI (with another model provider);
    replacing the processors does that and keeps ours."""
    global _WARNED_DISABLED
    if _WARNED_DISABLED or _PROCESSOR is None or not _PROCESSOR.enabled:
        return
    _WARNED_DISABLED = True
    _runtime.log.warning(
        "otel-assay: OpenAI Agents SDK tracing is disabled (%s): Runner runs record no agent, LLM or tool "
        "step, and their trials are empty runs. To stop only the upload of traces to OpenAI, keep tracing on "
        "and call agents.set_trace_processors([]) (otel-assay's processor stays).", how)


def _set_disabled(wrapped, instance, args, kwargs):
    out = wrapped(*args, **kwargs)
    if (args[0] if args else kwargs.get("disabled")):
        _warn_tracing_disabled("set_tracing_disabled(True)")
    return out


def _create_trace(wrapped, instance, args, kwargs):
    """``DefaultTraceProvider.create_trace``: a no-op trace that the run did not ask for
    (``RunConfig(tracing_disabled=True)`` asks, for that run only) means the SDK's tracing is
    off for the process, also when it was switched off before we were imported: the SDK has
    no public getter for that switch, but the trace it returns shows it."""
    tr = wrapped(*args, **kwargs)
    if isinstance(tr, NoOpTrace) and not kwargs.get("disabled"):
        _warn_tracing_disabled("OPENAI_AGENTS_DISABLE_TRACING" if _env_disabled() else "set_tracing_disabled(True)")
    return tr


def _env_disabled() -> bool:
    return os.environ.get("OPENAI_AGENTS_DISABLE_TRACING", "").strip().lower() in ("true", "1")


def instrument(module=None) -> bool:
    global _PROCESSOR, _PROVIDER
    if add_trace_processor is None:  # a package named "agents" that is not the OpenAI Agents SDK
        return False
    if _PROCESSOR is None:
        _PROCESSOR = AssayTracingProcessor()
        _PROVIDER = get_trace_provider()
        add_trace_processor(_PROCESSOR)
        for cls in type(_PROVIDER).__mro__:  # the provider's own set_processors, wherever defined
            if cls is not TraceProvider and "set_processors" in cls.__dict__:
                wrapt.wrap_function_wrapper(cls, "set_processors", _set_processors)
                break
        wrapt.wrap_function_wrapper(RunResultStreaming, "stream_events", _stream_events)
        wrapt.wrap_function_wrapper(AgentRunner, "run_streamed", _run_streamed)
        wrapt.wrap_function_wrapper(DefaultTraceProvider, "set_disabled", _set_disabled)
        wrapt.wrap_function_wrapper(DefaultTraceProvider, "create_trace", _create_trace)
    _PROCESSOR.enabled = True
    if _env_disabled():
        _warn_tracing_disabled("OPENAI_AGENTS_DISABLE_TRACING")
    return True


def uninstrument() -> None:
    # the SDK has no remove_trace_processor: the processor stays registered but inert
    if _PROCESSOR is not None:
        _PROCESSOR.enabled = False
