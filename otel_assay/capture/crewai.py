"""CrewAI adapter: ``crewai_event_bus`` listeners that build GenAI step spans.

CrewAI runs sync handlers on a thread pool, so handlers run out of order and after the
fact. Spans are therefore built from the events themselves: start/end times from the event
timestamps, parents from ``parent_event_id``, ends matched by ``started_event_id``. Events
that arrive before their parent wait until it is there. The context current when the crew
was kicked off (handlers run in a copy of it) gives the parent of the crew span, so a crew
inside a trial lands in the trial's trace with the trial's ``assay.*`` attributes (carried
in baggage, since the trial may have ended before a late handler runs).
``otel_assay.flush()`` first drains the event bus.

Mapping: crew kickoff -> ``invoke_workflow {crew}``; agent execution -> ``invoke_agent
{role}``; LLM call -> ``chat {model}`` (usage, finish reason, tool definitions, messages);
tool usage -> ``execute_tool {tool}`` (arguments, result; errors); agent reasoning ->
``plan {role}``; tasks are plumbing (no span; the task name is recorded on the agent span
as ``assay.crewai.task``). Delegation is a tool call (``Delegate work to coworker``) whose
coworker's agent execution nests under it when CrewAI links the events so.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
import time
from datetime import datetime
from typing import Any

import crewai
import crewai.events.types
import wrapt
from crewai.events import crewai_event_bus
from crewai.events.event_context import SCOPE_STARTING_EVENTS
from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import semconv
from . import _runtime
from ._spans import CLIENT, INTERNAL, args_json, clean, result_text, to_json, tool_call_part
from .trial import await_in_trial, call_in_trial, implicit_trial

FRAMEWORK = "crewai"

STARTS = {"crew_kickoff_started": "workflow", "agent_execution_started": "agent", "llm_call_started": "llm",
          "tool_usage_started": "tool", "task_started": "task", "agent_reasoning_started": "reason",
          "lite_agent_execution_started": "agent"}  # Agent.kickoff() without a crew
ENDS = {"crew_kickoff_completed": False, "crew_kickoff_failed": True, "agent_execution_completed": False,
        "agent_execution_error": True, "lite_agent_execution_completed": False, "lite_agent_execution_error": True,
        "llm_call_completed": False, "llm_call_failed": True,
        "tool_usage_finished": False, "tool_usage_error": True, "task_completed": False, "task_failed": True,
        "agent_reasoning_completed": False, "agent_reasoning_failed": True}


def _ns(ts: Any) -> int | None:
    if isinstance(ts, datetime):
        return int(ts.timestamp() * 1e9)
    return None


def _model_of(ev) -> str | None:
    m = getattr(ev, "model", None)
    return str(m) if m else None


class _Node:
    __slots__ = ("event_id", "kind", "span", "ctx", "parent_id", "alias", "ended")

    def __init__(self, event_id, kind, parent_id):
        self.event_id, self.kind, self.parent_id = event_id, kind, parent_id
        self.span = None   # our span (None for plumbing)
        self.ctx = None    # context children attach to
        self.alias = False
        self.ended = None  # time.monotonic() of its end event


# Ended nodes stay for late children (handlers run out of order, but within moments): a
# process that never calls flush() (a service) forgets them this long after their end.
_KEEP_ENDED_S = 60.0


class CrewAIListener:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, _Node] = {}
        self._waiting_start: dict[str, list] = {}   # parent event id -> [start events]
        self._waiting_end: dict[str, Any] = {}      # start event id -> end event
        self._tasks: dict[str, str] = {}            # task id -> task name
        self._swept = time.monotonic()
        self.enabled = True

    # --------------------------------------------------------------- events
    def handle(self, source, event) -> None:
        if not self.enabled:
            return
        t = getattr(event, "type", None) or ""
        try:
            with self._lock:
                if t in STARTS:
                    self._start(event, STARTS[t])
                elif t in ENDS:
                    self._end(event, ENDS[t])
                elif t in SCOPE_STARTING_EVENTS:
                    # flows, memory...: plumbing, but other events link to them as parent. Not
                    # every *_started event: agent_logs_started, whose end is
                    # agent_logs_execution, would wait for an end that never comes
                    self._start(event, "task")
                elif t.endswith(_END_SUFFIXES):
                    self._end(event, t.endswith(("_failed", "_error")))
                now = time.monotonic()
                if now - self._swept > _KEEP_ENDED_S / 4:
                    self._swept = now
                    for k in [k for k, n in self._nodes.items() if n.ended is not None and now - n.ended > _KEEP_ENDED_S]:
                        del self._nodes[k]
        except Exception:  # never break the crew
            _runtime.log.exception("otel-assay: CrewAI event %s", t)

    def _start(self, ev, kind) -> None:
        pid = getattr(ev, "parent_event_id", None)
        if kind == "workflow":
            base = otel_context.get_current()  # a copy of the kickoff caller's context
            self._open(ev, kind, base)
            return
        parent = self._nodes.get(pid) if pid else None
        if parent is None:
            if pid:
                self._waiting_start.setdefault(pid, []).append(ev)
                return
            self._open(ev, kind, otel_context.get_current())
            return
        self._open(ev, kind, parent.ctx)

    def _open(self, ev, kind, parent_ctx) -> None:
        node = _Node(ev.event_id, kind, getattr(ev, "parent_event_id", None))
        start = _ns(getattr(ev, "timestamp", None))
        if kind == "task":
            node.ctx = parent_ctx
            if getattr(ev, "task_id", None):
                self._tasks[str(ev.task_id)] = getattr(ev, "task_name", None) or ""
        else:
            name, attrs, span_kind = self._spec(ev, kind)
            attrs[semconv.ASSAY_FRAMEWORK] = FRAMEWORK
            node.span = _runtime.tracer().start_span(name, context=parent_ctx, kind=span_kind,
                                                     attributes=clean(attrs), start_time=start)
            node.ctx = trace.set_span_in_context(node.span, parent_ctx)
        self._nodes[ev.event_id] = node
        for child in self._waiting_start.pop(ev.event_id, []):
            self._start(child, STARTS.get(child.type, "task"))
        end = self._waiting_end.pop(ev.event_id, None)
        if end is not None:
            self._end(end, ENDS.get(end.type, end.type.endswith(("_failed", "_error"))))

    def _spec(self, ev, kind):
        if kind == "workflow":
            name = getattr(ev, "crew_name", None) or "crew"
            return (f"invoke_workflow {name}", {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_WORKFLOW,
                                                semconv.GEN_AI_WORKFLOW_NAME: name, semconv.ASSAY_STEP_KIND: "workflow"},
                    INTERNAL)
        if kind == "agent":
            info = getattr(ev, "agent_info", None) or {}  # Agent.kickoff(): the agent as a dict
            role = (getattr(ev, "agent_role", None) or getattr(getattr(ev, "agent", None), "role", None)
                    or info.get("role") or "agent")
            task = getattr(ev, "task", None)
            return (f"invoke_agent {role}", {
                semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: role,
                semconv.GEN_AI_AGENT_ID: str(getattr(ev, "agent_id", None) or info.get("id") or "") or None,
                "assay.crewai.task": getattr(task, "name", None) or getattr(task, "description", None)
                if task is not None else self._tasks.get(str(getattr(ev, "task_id", None))),
                semconv.ASSAY_STEP_KIND: "agent"}, INTERNAL)
        if kind == "llm":
            model = _model_of(ev)
            attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT, semconv.GEN_AI_REQUEST_MODEL: model,
                     semconv.GEN_AI_PROVIDER_NAME: _provider(model), semconv.GEN_AI_AGENT_NAME: getattr(ev, "agent_role", None),
                     semconv.ASSAY_STEP_KIND: "llm"}
            if getattr(ev, "tools", None):
                attrs[semconv.GEN_AI_TOOL_DEFINITIONS] = to_json(ev.tools)
            if _runtime.capture_content() and getattr(ev, "messages", None) is not None:
                msgs = ev.messages
                if isinstance(msgs, str):
                    msgs = [{"role": "user", "content": msgs}]
                attrs[semconv.GEN_AI_INPUT_MESSAGES] = to_json(
                    [{"role": m.get("role", "user"), "parts": [{"type": "text", "content": str(m.get("content", ""))}]}
                     for m in msgs if isinstance(m, dict)])
            return (f"chat {model}" if model else "chat", attrs, CLIENT)
        if kind == "tool":
            name = getattr(ev, "tool_name", None) or "tool"
            attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: name,
                     semconv.GEN_AI_TOOL_TYPE: "function", semconv.GEN_AI_AGENT_NAME: getattr(ev, "agent_role", None),
                     semconv.ASSAY_STEP_KIND: "tool"}
            if _runtime.capture_content():
                attrs[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = args_json(getattr(ev, "tool_args", None))
            return (f"execute_tool {name}", attrs, INTERNAL)
        role = getattr(ev, "agent_role", None) or "agent"
        return (f"plan {role}", {semconv.GEN_AI_OPERATION_NAME: semconv.OP_PLAN, semconv.GEN_AI_AGENT_NAME: role,
                                 semconv.ASSAY_STEP_KIND: "reason"}, INTERNAL)

    def _end(self, ev, failed: bool) -> None:
        sid = getattr(ev, "started_event_id", None)
        node = self._nodes.get(sid) if sid else None
        if node is None:
            if sid:
                self._waiting_end[sid] = ev
            return
        if node.ended is None:
            node.ended = time.monotonic()
        span = node.span  # the node stays: late children (handlers run out of order) still find it
        if span is None or node.alias:
            return
        node.alias = True  # ended
        end = _ns(getattr(ev, "timestamp", None))
        attrs: dict[str, Any] = {}
        if node.kind == "llm":
            usage = getattr(ev, "usage", None) or {}
            attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = usage.get("prompt_tokens", usage.get("input_tokens"))
            attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = usage.get("completion_tokens", usage.get("output_tokens"))
            attrs[semconv.GEN_AI_RESPONSE_ID] = getattr(ev, "response_id", None)
            fr = getattr(ev, "finish_reason", None)
            if fr:
                attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [str(fr)]
            model = _model_of(ev)
            attrs[semconv.GEN_AI_RESPONSE_MODEL] = model
            if model and getattr(span, "name", None) == "chat":  # an unsampled span has no name
                span.update_name(f"chat {model}")
                attrs[semconv.GEN_AI_REQUEST_MODEL] = model
            if _runtime.capture_content() and getattr(ev, "response", None) is not None:
                parts = _tool_call_parts(ev.response) or [{"type": "text", "content": result_text(ev.response)}]
                attrs[semconv.GEN_AI_OUTPUT_MESSAGES] = to_json([{"role": "assistant", "parts": parts}])
        elif node.kind == "tool":
            if _runtime.capture_content() and getattr(ev, "output", None) is not None:
                attrs[semconv.GEN_AI_TOOL_CALL_RESULT] = result_text(ev.output)
        elif node.kind in ("agent", "workflow") and _runtime.capture_content():
            out = getattr(ev, "output", None)
            if out is not None:
                attrs[semconv.GEN_AI_OUTPUT_MESSAGES] = to_json(
                    [{"role": "assistant", "parts": [{"type": "text", "content": result_text(getattr(out, "raw", out))}]}])
        span.set_attributes(clean(attrs))
        # a tool that ran but did not succeed (it returned a ToolFailure, an MCP error, an unknown
        # tool or a spent usage limit) finishes normally with the failure on the event
        failure = getattr(ev, "failure", None) if node.kind == "tool" and not failed else None
        if failure is not None:
            reason = getattr(failure, "reason", None)
            et = f"ToolFailure.{getattr(reason, 'value', reason)}" if reason is not None else "ToolFailure"
            msg = str(getattr(failure, "message", None) or failure)
            failed = True
        elif failed:
            err = getattr(ev, "error", None)
            et = type(err).__name__ if isinstance(err, BaseException) else _error_type(err)
            msg = str(err) if err is not None else ""
        if failed:
            span.set_attribute(semconv.ERROR_TYPE, et)
            span.add_event("exception", {"exception.type": et, "exception.message": msg}, timestamp=end)
            span.set_status(trace.Status(trace.StatusCode.ERROR, msg[:1024]))
        span.end(end_time=end)

    def flush(self, timeout_s: float = 30.0) -> None:
        try:
            crewai_event_bus.flush(timeout=timeout_s)
        except Exception:
            pass
        with self._lock:  # every handler has run: forget ended nodes (not a running crew's: a flush
            # from another thread, or a periodic one, must not orphan the events still to come)
            for k in [k for k, n in self._nodes.items() if n.ended is not None]:
                del self._nodes[k]


# (not "_paused": a paused flow resumes later under the same events)
_END_SUFFIXES = ("_completed", "_finished", "_failed", "_error", "_canceled")


def _field(obj, key):
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _tool_call_parts(response) -> list | None:
    """With native function calling an LLM call's response is the list of tool calls the
    model asked for, in the provider's shape (OpenAI ``function`` calls, objects or dicts;
    Anthropic ``tool_use`` blocks; Gemini ``function_call`` parts): GenAI ``tool_call``
    parts, or None when the response is not such a list."""
    if not isinstance(response, (list, tuple)) or not response:
        return None
    parts = []
    for c in response:
        fn = _field(c, "function") or _field(c, "function_call")
        if fn is not None:
            name, args = _field(fn, "name"), _field(fn, "arguments")
            if args is None:
                args = _field(fn, "args")
            call_id = _field(c, "id") or _field(fn, "id")
        elif _field(c, "type") == "tool_use":
            name, args, call_id = _field(c, "name"), _field(c, "input"), _field(c, "id")
        else:
            return None
        if not name:
            return None
        parts.append(tool_call_part(call_id, str(name), args))
    return parts


def _error_type(err) -> str:
    s = str(err or "")
    head = s.split(":", 1)[0].strip()
    return head if head.isidentifier() else "CrewAIError"


def _provider(model: str | None) -> str | None:
    if not model:
        return None
    if "/" in model:
        return model.split("/", 1)[0]
    m = model.lower()
    if m.startswith(("gpt", "o1", "o3", "o4")):
        return "openai"
    if m.startswith("claude"):
        return "anthropic"
    if m.startswith("gemini"):
        return "gcp.gemini"
    return None


_LISTENER: CrewAIListener | None = None
_REGISTERED: list = []


def _event_classes() -> list:
    """Every start/end event class (all of them link parents, so plumbing events matter)."""
    out = []
    wanted = set(STARTS) | set(ENDS)
    for info in pkgutil.iter_modules(crewai.events.types.__path__):
        try:
            mod = importlib.import_module(f"crewai.events.types.{info.name}")
        except Exception:
            continue
        for obj in vars(mod).values():
            if isinstance(obj, type) and getattr(obj, "model_fields", None) and "type" in obj.model_fields:
                default = obj.model_fields["type"].default
                if isinstance(default, str) and (default in wanted or default.endswith(("_started",) + _END_SUFFIXES)) \
                        and obj not in out:
                    out.append(obj)
    return out


_PATCHES: list = []  # (owner, attribute name, original)


def _implicit(instance):
    if getattr(instance, "stream", False):
        return None
    return implicit_trial(getattr(instance, "name", None) or getattr(instance, "role", None), attach=True)


def _kickoff(wrapped, instance, args, kwargs):
    """A crew (or an agent) kicked off outside any trial or trace, with OTEL_ASSAY_SCENARIO
    set: a trial of its own, as a top-level run of every other framework is. The trial is
    the current context while the kickoff runs, so the event handlers (which run in a copy
    of it) put the crew under it; the kickoff's own exception decides a failure's class
    (the events carry only its text). A streamed crew goes on after kickoff returns: no
    implicit trial (wrap it in otel_assay.trial)."""
    return call_in_trial(_implicit(instance), wrapped, *args, **kwargs)


async def _akickoff(wrapped, instance, args, kwargs):
    return await await_in_trial(_implicit(instance), wrapped, *args, **kwargs)


def _patch_kickoffs() -> None:
    for owner in (crewai.Crew, crewai.Agent):
        # kickoff_async runs kickoff in a thread (which carries the context): only the native
        # async entry point needs its own wrapper
        for attr, wrapper in (("kickoff", _kickoff), ("akickoff", _akickoff)):
            orig = owner.__dict__.get(attr)
            if orig is not None and not isinstance(orig, wrapt.FunctionWrapper):
                setattr(owner, attr, wrapt.FunctionWrapper(orig, wrapper))
                _PATCHES.append((owner, attr, orig))


def instrument(module=None) -> bool:
    global _LISTENER
    if _LISTENER is None:
        _LISTENER = CrewAIListener()
        _runtime.add_pre_flush(_LISTENER.flush)
    _LISTENER.enabled = True
    if not _REGISTERED:
        for cls in _event_classes():
            crewai_event_bus.on(cls)(_LISTENER.handle)
            _REGISTERED.append(cls)
    if not _PATCHES:
        _patch_kickoffs()
    return True


def uninstrument() -> None:
    if _LISTENER is not None:
        _LISTENER.enabled = False
        for cls in _REGISTERED:
            try:
                crewai_event_bus.off(cls, _LISTENER.handle)
            except Exception:
                pass
        _REGISTERED.clear()
    while _PATCHES:
        owner, attr, orig = _PATCHES.pop()
        setattr(owner, attr, orig)
