"""OpenAI Agents SDK adapter: a ``TracingProcessor`` that turns the SDK's spans into OTel
spans in the trace of the current context (so inside a trial, in the trial's trace).

Registered with ``agents.add_trace_processor`` (the SDK's own processors, e.g. the upload
to OpenAI, stay). Mapping (reference/instrumentation.md §7.2):

* an SDK trace -> ``invoke_workflow {trace name}`` (child of the current span);
* ``agent`` -> ``invoke_agent {name}``;
* ``generation`` / ``response`` -> ``chat {model}`` (CLIENT) with usage, finish reason,
  tool calls and messages;
* ``function`` -> ``execute_tool {name}`` with arguments, result and the call id (taken
  from the tool call of the generation that asked for it);
* ``handoff`` -> ``handoff {to_agent}`` (``assay.handoff.from_agent`` / ``to_agent``);
* ``guardrail`` -> ``guardrail {name}`` (``assay.guardrail.triggered``);
* ``task`` / ``turn`` (plumbing) get no span; other types keep their type as name.

SDK span errors become status ERROR + ``error.type`` + an exception event.
"""

from __future__ import annotations

import threading
from typing import Any


from .. import semconv
from . import _runtime
from ._spans import CLIENT, args_json, clean, fail, result_text, start_span, to_json, tool_call_part
from .trial import implicit_trial

FRAMEWORK = "openai_agents"
_STRUCTURAL = {"task", "turn"}


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


def _chat_messages(msgs) -> list:
    out = []
    for m in msgs or []:
        if not isinstance(m, dict):
            continue
        role = m.get("role", "user")
        parts = []
        c = m.get("content")
        if isinstance(c, str) and c:
            parts.append({"type": "text", "content": c})
        elif isinstance(c, list):
            for p in c:
                if isinstance(p, dict) and p.get("text"):
                    parts.append({"type": "text", "content": p["text"]})
        for tc in m.get("tool_calls") or []:
            f = tc.get("function") or {}
            parts.append(tool_call_part(tc.get("id"), f.get("name"), f.get("arguments")))
        if role == "tool":
            parts = [{"type": "tool_call_response", "id": m.get("tool_call_id"), "result": c}]
        out.append({"role": role, "parts": parts})
    return out


class AssayTracingProcessor:
    """agents.tracing.TracingProcessor implementation (duck-typed, so this module imports
    without the SDK)."""

    def __init__(self) -> None:
        self._roots: dict[str, Any] = {}       # sdk trace id -> (otel span, implicit trial)
        self._spans: dict[str, Any] = {}       # sdk span id -> otel span (or parent's for plumbing)
        self._owned: set[str] = set()          # sdk span ids that own their otel span
        self._calls: dict[str, dict] = {}      # sdk trace id -> {(name, args json): [call ids]}
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
            self._roots[tr.trace_id] = (span, t)

    def on_trace_end(self, tr) -> None:
        with self._lock:
            root = self._roots.pop(tr.trace_id, None)
            self._calls.pop(tr.trace_id, None)
        if root is not None:
            span, t = root
            span.end()
            if t is not None:
                t.finish()

    # -------------------------------------------------------------- spans
    def _parent(self, s):
        with self._lock:
            if s.parent_id and s.parent_id in self._spans:
                return self._spans[s.parent_id]
            root = self._roots.get(s.trace_id)
        return root[0] if root else None

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

    def on_span_end(self, s) -> None:
        with self._lock:
            span = self._spans.pop(s.span_id, None)
            owned = s.span_id in self._owned
            self._owned.discard(s.span_id)
        if span is None or not owned:
            return
        d = _data(s)
        kind = _kind(s, d)
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
        else:
            span.end()

    def _end_generation(self, s, span, d, kind) -> None:
        usage = d.get("usage") or {}
        output = d.get("output") or []
        model = d.get("model")
        resp = d.get("response") if isinstance(d.get("response"), dict) else None
        if resp:
            model = model or resp.get("model")
            usage = usage or resp.get("usage") or {}
        attrs = {semconv.GEN_AI_USAGE_INPUT_TOKENS: usage.get("input_tokens", usage.get("prompt_tokens")),
                 semconv.GEN_AI_USAGE_OUTPUT_TOKENS: usage.get("output_tokens", usage.get("completion_tokens")),
                 semconv.GEN_AI_RESPONSE_MODEL: model}
        if model and span.name == "chat":
            attrs[semconv.GEN_AI_REQUEST_MODEL] = model
            span.update_name(f"chat {model}")
        msgs = _chat_messages(output)
        calls = [p for m in msgs for p in m["parts"] if p.get("type") == "tool_call"]
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = ["tool_calls" if calls else "stop"]
        cfg = d.get("model_config") or {}
        tools = cfg.get("tools") if isinstance(cfg, dict) else None
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
                attrs[semconv.GEN_AI_INPUT_MESSAGES] = to_json(_chat_messages(d.get("input")))
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

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


_PROCESSOR: AssayTracingProcessor | None = None


def instrument(module=None) -> bool:
    global _PROCESSOR
    try:
        from agents import add_trace_processor
    except ImportError:  # a package named "agents" that is not the OpenAI Agents SDK
        return False
    if _PROCESSOR is None:
        _PROCESSOR = AssayTracingProcessor()
        add_trace_processor(_PROCESSOR)
    _PROCESSOR.enabled = True
    return True


def uninstrument() -> None:
    # the SDK has no remove_trace_processor: the processor stays registered but inert
    if _PROCESSOR is not None:
        _PROCESSOR.enabled = False
