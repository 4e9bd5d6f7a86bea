"""LangGraph / LangChain adapter: a callback handler injected into every callback manager.

Injection: ``langchain_core.tracers.context.register_configure_hook`` with a ContextVar
whose *default* is our handler, so it is present in sync, async, streaming and thread
runs without touching user code.

Spans:

* the root run (a compiled graph, an agent from ``create_agent``, any top-level chain) ->
  ``invoke_agent {name}``; a LangGraph subgraph -> a nested ``invoke_agent {name}``;
* chat model calls -> ``chat {model}`` (CLIENT) with request/response model, provider,
  token usage, finish reasons, tool definitions, input/output messages. A chat model may
  call another one (a user model whose ``_generate`` invokes the provider's model): both
  are LLM runs, and only the innermost records the span, as in the other adapters (see
  ``_LLMRun``);
* tool runs -> ``execute_tool {tool}`` with call id, arguments and result; raised and
  handled (``ToolNode(handle_tool_errors=True)``) tool errors both mark the span ERROR;
* plumbing chains (nodes, ``tools_condition``, ``RunnableSequence``...) get no span:
  their children attach to the nearest span above; the LangGraph node a step ran in is
  recorded as ``assay.graph.node``;
* a graph invocation that pauses for a human ends like a completed one (LangGraph keeps
  the interrupt in its loop): seen from a node's ``GraphInterrupt`` (``interrupt()``) or
  from LangGraph's lifecycle event (also breakpoints, see ``_graph_callbacks``), it is
  marked ``assay.incomplete=interrupted`` and its implicit trial gets no verdict; the next
  invocation of that graph on its checkpointer thread with an answer (a ``Command``, or
  ``None`` past a breakpoint), the resume, records ``assay.resumes``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from contextvars import ContextVar
from typing import Any
from uuid import UUID

import wrapt
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook
from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import semconv
from . import _runtime
from ._spans import CLIENT, args_json, fail, result_text, start_span, text_parts, to_json, tool_call_part
from .trial import implicit_trial

FRAMEWORK = "langgraph"
_CONTROL_FLOW = {"GraphInterrupt", "NodeInterrupt", "ParentCommand", "GraphBubbleUp", "Interrupt"}
_INTERRUPTS = {"GraphInterrupt", "NodeInterrupt"}  # interrupt(): the graph pauses for a human
_RESUMABLE_MAX = 4096  # threads whose last invocation was interrupted, remembered for their resume

_VAR: ContextVar | None = None  # the configure hook's variable; registered once, for good
_LLM: ContextVar = ContextVar("otel_assay_langchain_llm", default=None)  # the LLM run whose model code runs here


def _role(msg: Any) -> str:
    t = getattr(msg, "type", None)
    return _ROLES.get(t, t or "user")


# message types, including the chunk types a streamed answer is assembled from
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
          "HumanMessageChunk": "user", "AIMessageChunk": "assistant", "SystemMessageChunk": "system",
          "ToolMessageChunk": "tool"}


def _message_json(msg: Any) -> dict[str, Any]:
    role = _role(msg)
    if role == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": getattr(msg, "tool_call_id", None),
                                           "result": result_text(getattr(msg, "content", None))}]}
    m = text_parts(role, getattr(msg, "content", None))
    # a tool call whose arguments the model garbled is still a tool call the model asked for
    # (LangChain keeps it apart, in invalid_tool_calls, with its raw argument text): without
    # it such a turn read as the final answer
    calls = (getattr(msg, "tool_calls", None) or []) + (getattr(msg, "invalid_tool_calls", None) or [])
    if calls:
        m["parts"] = [p for p in m["parts"] if p.get("content")] + [
            tool_call_part(c.get("id"), c.get("name"), c.get("args")) for c in calls]
    return m


_CACHE_MAX = 4096  # cached message / tool-definition JSON strings (entries hold their objects alive)


class _Run:
    __slots__ = ("span", "parent", "trial", "kind", "node", "root", "token", "call_id", "interrupted", "thread",
                 "content")

    def __init__(self, span, parent, trial=None, kind="", node=None, root=None):
        self.span = span        # our span for this run, or None for plumbing
        self.parent = parent    # nearest span at or above this run (what children attach to;
                                # for an LLM run, which has no span yet, its own parent)
        self.trial = trial      # implicit trial opened at this (root) run
        self.kind = kind
        self.node = node
        self.root = root        # run id of the graph invocation this run belongs to
        self.token = None       # context token while the run's span is the current span
        self.call_id = None     # a tool run's call id, when LangChain gave one
        self.interrupted = False  # a graph invocation (root run) that paused for a human
        self.thread = None      # a root run's checkpointer thread id
        self.content = False    # a model or tool run: whether it records message content (see _llm_start)


class _LLMRun(_Run):
    """A chat / completion run. A run that reached another LLM run (``delegated``) records
    nothing: the inner run is the model call as made (real model name, messages and tools
    as sent, usage as returned), a model asking again makes one call per attempt, and a
    model answering from its own cache has no inner run and records itself. So the span is
    started only when the run ends, with the time and parent of its start (an OTel span
    cannot be dropped once started). That costs nothing per step, the span being created
    once either way, and loses nothing: LangChain gives LLM runs no child runs, and one made
    a child by hand attaches where the LLM run's span would have (``parent``). Keeping the
    outer span and moving the inner run's data onto it would merge the attempts of a retry.

    An inner run made a child of the outer one (a callback manager with the outer's run id)
    is seen by its parent id. An inner model invoked plainly in ``_generate`` takes its
    parent from the context's config, the graph node, as a concurrent sibling call does; so
    ``_LLM`` marks the run whose model code runs in this context, from its start to its
    first token or its end (``live``): after that, the consumer of a stream runs between
    chunks, and its calls are not part of the streamed one."""

    __slots__ = ("name", "attrs", "start", "delegated", "live", "prev", "outer", "open_inner")

    def __init__(self, name, attrs, parent, kind, root=None, content=False):
        self.span, self.parent, self.trial, self.kind, self.node, self.root = None, parent, None, kind, None, root
        self.content = content
        self.name, self.attrs, self.start = name, attrs, time.time_ns()
        self.delegated, self.live, self.prev = False, True, None
        self.outer, self.open_inner = None, 0  # the run this one was reached from; runs it reached still open


class _MaybeGraph(_Run):
    """A run inside a LangGraph node that may be a subgraph: it records an agent step
    (``_open_subgraph``, from its start) only once a node of its own starts."""

    __slots__ = ("name", "start", "ns")

    def __init__(self, parent, root, name, ns, node):
        super().__init__(None, parent, node=node, root=root)
        self.name, self.start, self.ns = name, time.time_ns(), ns


def _open_subgraph(r: _MaybeGraph) -> None:
    span = start_span(f"invoke_agent {r.name}", {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: r.name,
        semconv.ASSAY_STEP_KIND: "agent", semconv.ASSAY_FRAMEWORK: FRAMEWORK,
        semconv.ASSAY_GRAPH_NODE: r.node}, parent=r.parent, start_time=r.start)
    r.span = r.parent = span
    r.kind = "agent"


def _live(r):
    while r is not None and not r.live:
        r = r.prev
    return r


def _tool_message_of_command(output: Any, call_id: Any) -> Any:
    """A LangGraph tool may return ``Command(update={"messages": [ToolMessage(...)]})`` (handoffs,
    tools that update the state): its result is the ToolMessage answering this call, not the
    Command. Anything else is returned as it is."""
    if type(output).__name__ != "Command":
        return output
    update = getattr(output, "update", None)
    if isinstance(update, (list, tuple)):  # [(key, value), ...]
        update = dict(kv for kv in update if isinstance(kv, (list, tuple)) and len(kv) == 2)
    msgs = update.get("messages") if isinstance(update, dict) else None
    if not isinstance(msgs, (list, tuple)):
        msgs = [msgs] if msgs is not None else []
    tool_msgs = [m for m in msgs if getattr(m, "type", None) == "tool"]
    for m in tool_msgs:
        if call_id is None or getattr(m, "tool_call_id", None) == call_id:
            return m
    return tool_msgs[0] if tool_msgs else output


def _mapping(obj: Any) -> dict:
    """A provider's metadata as a dict: usage may come as an object (pydantic or plain), and
    a step must not be lost for the shape of an optional field."""
    if obj is None or isinstance(obj, dict):
        return obj or {}
    for attr in ("model_dump", "dict"):
        fn = getattr(obj, attr, None)
        if callable(fn):
            try:
                d = fn()
            except Exception:
                continue
            if isinstance(d, dict):
                return d
    keys = ("input_tokens", "output_tokens", "prompt_tokens", "completion_tokens", "total_tokens")
    return {k: getattr(obj, k) for k in keys if hasattr(obj, k)}


def _trace_id(r) -> int | None:
    """The trace a run's step belongs to (None for plumbing that attaches nowhere)."""
    holder = r.span if r.span is not None else r.parent
    if holder is None:
        return None
    span = holder if isinstance(holder, trace.Span) else trace.get_current_span(holder)
    return span.get_span_context().trace_id


def _detach(r) -> None:
    if r.token is not None:
        token, r.token = r.token, None
        try:
            otel_context.detach(token)
        except Exception:  # ended in another context (a cancelled task): nothing to restore there
            pass


def _ended(r) -> None:
    _release(r)
    if r.outer is not None:
        r.outer.open_inner -= 1


def _release(r) -> None:
    r.live = False
    if _LLM.get() is r:
        _LLM.set(_live(r.prev))


class AssayCallbackHandler(BaseCallbackHandler):
    """LangChain callback handler that emits GenAI step spans."""

    run_inline = True          # no executor hop for this sync handler inside async runs
    raise_error = False
    name = "otel_assay"

    def __init__(self) -> None:
        super().__init__()
        # LangChain has no public way to unregister a configure hook, so the handler stays
        # in every callback manager once instrumented: uninstrument() clears this flag and
        # the handler starts no further run (the runs already started still end, so no span
        # is left open)
        self.enabled = True
        self._runs: dict[UUID, _Run] = {}
        # A chat call's input is the whole conversation so far: serialise each message once
        # (keyed by the message object, checked by identity of its content and tool calls)
        # and join, instead of re-encoding the history on every step. Bounded; cleared when
        # no run is in flight.
        self._json_cache: dict[int, tuple] = {}
        # (graph name, thread id) -> trace id (hex) of its interrupted invocation, until it resumes
        self._resumable: dict[tuple[str, str], str] = {}

    def _cached_json(self, obj: Any, make) -> str:
        """``to_json(make(obj))``, kept in the cache with what it was made from."""
        content, calls = getattr(obj, "content", None), getattr(obj, "tool_calls", None)
        hit = self._json_cache.get(id(obj))
        if hit is not None and hit[0] is obj and hit[1] is content and hit[2] is calls:
            return hit[3]
        s = to_json(make(obj))
        if len(self._json_cache) >= _CACHE_MAX:
            self._json_cache.clear()
        self._json_cache[id(obj)] = (obj, content, calls, s)
        return s

    def _messages_json(self, messages) -> str:
        """``to_json([_message_json(m) for m in messages])`` (json.dumps' item separator is
        ", "), each message's JSON from the cache: most of the history was sent in the last
        call."""
        return "[" + ", ".join(self._cached_json(m, _message_json) for m in messages) + "]"

    # ---------------------------------------------------------------- chains
    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, tags=None, metadata=None, **kw):
        if not self.enabled:
            return
        parent_run = self._runs.get(parent_run_id)
        md = metadata or {}
        if parent_run is not None:
            ns = md.get("checkpoint_ns")
            lg_ns = md.get("langgraph_checkpoint_ns")
            if (isinstance(parent_run, _MaybeGraph) and parent_run.span is None
                    and isinstance(lg_ns, str) and lg_ns.startswith(parent_run.ns + "|")):
                _open_subgraph(parent_run)  # a node of its own: the parent run is a (sub)graph
            if ns and lg_ns == ns:
                # a graph run inside a node, or any runnable a node runs (prompt | model |
                # parser, a model's retry wrapper): their metadata are the same. Only a graph
                # runs nodes of its own, so its agent step opens when its first node starts
                self._runs[run_id] = _MaybeGraph(parent_run.parent, parent_run.root, kw.get("name") or "subgraph",
                                                 ns, md.get("langgraph_node"))
            else:
                self._runs[run_id] = _Run(None, parent_run.parent, root=parent_run.root)
            return
        if parent_run_id is not None:  # parent unknown (handler added mid-run): plumbing
            self._runs[run_id] = _Run(None, None)
            return
        # a root run: the agent / graph invocation
        name = kw.get("name") or (serialized or {}).get("name") or "LangGraph"
        t = implicit_trial(name)
        attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: name,
                 semconv.ASSAY_STEP_KIND: "agent", semconv.ASSAY_FRAMEWORK: FRAMEWORK}
        if _runtime.capture_content() and isinstance(inputs, dict) and isinstance(inputs.get("messages"), list):
            try:
                attrs[semconv.GEN_AI_INPUT_MESSAGES] = to_json([_message_json(m) for m in inputs["messages"]
                                                                if hasattr(m, "content")])
            except Exception:
                pass
        # thread ids belong to a checkpointer, and every tutorial uses "1": a resume is the same
        # graph answering its pause (a Command, or None to go on past a breakpoint), not
        # another graph on that id or fresh input, which starts over
        thread = (name, str(md["thread_id"])) if md.get("thread_id") is not None else None
        paused = self._resumable.pop(thread, None) if thread is not None and self._resumable else None
        resumes = paused if inputs is None or type(inputs).__name__ == "Command" else None
        if resumes is not None:
            # the human's answer to an interrupted invocation: a trial of its own (the other one's
            # trace has ended), which says which one it continues
            attrs[semconv.ASSAY_RESUMES] = resumes
            if t is not None:
                t.span.set_attribute(semconv.ASSAY_RESUMES, resumes)
        span = start_span(f"invoke_agent {name}", attrs, parent=t.span if t else None)
        run = self._runs[run_id] = _Run(span, span, trial=t, kind="agent", root=run_id)
        run.thread = thread

    def _end_abandoned(self, root_id, error: BaseException | None) -> None:
        """End the steps of a graph invocation that are still open when it ends.

        A step cancelled mid-flight (asyncio timeout, a sibling node failing in a fan-out)
        gets no callback: tools catch only Exception, and a model's error callback runs in
        a task that is itself cancelled. Its tool or model call did happen, so it is
        recorded, as failed, rather than lost (which would also hide the work from the
        timeout-with-work error class)."""
        # a copy: other threads' runs come and go meanwhile
        stale = [rid for rid, r in list(self._runs.items()) if r.root == root_id]
        self._abandon(stale, "the graph run ended", error)

    def end_trial(self, trace_id: int, error: BaseException | None) -> None:
        """End the steps of a trial still open when the trial ends: a model or tool called on
        its own (not inside a graph or chain, whose end does this) and cut off by a timeout or
        a cancellation gets no callback either."""
        stale = [rid for rid, r in list(self._runs.items()) if _trace_id(r) == trace_id]
        self._abandon(stale, "the trial ended", error)

    def _abandon(self, stale, what: str, error: BaseException | None) -> None:
        # cancelled, not failed by itself: the run's own error is on the run's span
        ended = f"{what} ({type(error).__name__})" if error is not None else what
        # a model call that reached another records only if that one is over: a call cut off
        # with no callback is still "in progress" in its context, so the next call made there
        # (a retry after a timeout) took it for a model calling a model
        records = {rid: not r.delegated or r.open_inner == 0 for rid in stale
                   if isinstance(r := self._runs.get(rid), _LLMRun)}
        for rid in stale:
            r = self._runs.pop(rid, None)
            if r is None:  # ended meanwhile
                continue
            if isinstance(r, _LLMRun):
                _ended(r)
                if records.get(rid):
                    fail(start_span(r.name, r.attrs, kind=CLIENT, parent=r.parent, start_time=r.start),
                         type_name="CancelledError", message=f"{ended} before this model call finished")
            elif r.span is not None and r.kind == "tool":
                fail(r.span, type_name="CancelledError", message=f"{ended} before this tool call finished")
            elif r.span is not None:
                r.span.end()

    def _paused(self, r) -> None:
        """A graph invocation that ended paused for a human: incomplete, not passed; its
        thread's next invocation (the resume) is linked to it."""
        r.span.set_attribute(semconv.ASSAY_INCOMPLETE, "interrupted")
        if r.thread is not None:
            if len(self._resumable) >= _RESUMABLE_MAX:
                self._resumable.clear()
            self._resumable[r.thread] = format(r.span.get_span_context().trace_id, "032x")

    def on_chain_end(self, outputs, *, run_id, **kw):
        r = self._runs.pop(run_id, None)
        if r is None or r.span is None:
            return
        if r.root == run_id:
            self._end_abandoned(run_id, None)
        if r.trial is not None or r.kind == "agent":
            if _runtime.capture_content() and isinstance(outputs, dict):
                msgs = outputs.get("messages")
                if isinstance(msgs, list) and msgs and hasattr(msgs[-1], "content"):
                    try:
                        r.span.set_attribute(semconv.GEN_AI_OUTPUT_MESSAGES, to_json([_message_json(msgs[-1])]))
                    except Exception:
                        pass
        if r.interrupted:
            self._paused(r)
        r.span.end()
        if r.trial is not None:
            r.trial.finish(incomplete="interrupted" if r.interrupted else None)
        if not self._runs:
            self._json_cache.clear()

    def on_chain_error(self, error, *, run_id, **kw):
        r = self._runs.pop(run_id, None)
        if r is None:
            return
        interrupt = type(error).__name__ in _INTERRUPTS
        if interrupt and r.root is not None and r.root != run_id:
            # a node (or a tool in it) paused the graph: the graph's loop keeps the interrupt,
            # and its invocation ends as if complete (on_chain_end, or no callback at all for
            # interrupt_before / interrupt_after breakpoints)
            root = self._runs.get(r.root)
            if root is not None:
                root.interrupted = True
        if r.span is None:
            return
        if r.root == run_id:
            self._end_abandoned(run_id, error)
        # interrupts, Command(graph=PARENT) and a stream the caller stopped reading (GeneratorExit:
        # break or close(), as Trial.__exit__ treats it) are not failures
        stopped = type(error).__name__ in _CONTROL_FLOW or isinstance(error, GeneratorExit)
        interrupted = stopped and r.root == run_id and (interrupt or r.interrupted)
        if interrupted:
            self._paused(r)
        # a reader that stops a stream leaves the invocation incomplete: no failure, no verdict
        caller_stopped = isinstance(error, GeneratorExit) and r.root == run_id and not interrupted
        if caller_stopped:
            r.span.set_attribute(semconv.ASSAY_INCOMPLETE, "caller_stopped")
        if stopped:
            r.span.end()
        else:
            fail(r.span, error)
        if r.trial is not None:
            r.trial.finish(None if stopped else error, incomplete="interrupted" if interrupted else
                           "caller_stopped" if caller_stopped else None)

    # ---------------------------------------------------------------- models
    def _llm_start(self, op, serialized, content, messages, run_id, parent_run_id, metadata, kw):
        """``content``: whether this model call records message content, as read when it
        starts; its end records the output by the same answer (reading the environment costs
        as much as a small attribute's whole export, at every callback)."""
        md = metadata or {}
        params = kw.get("invocation_params") or {}
        model = (params.get("model") or params.get("model_name") or params.get("model_id")
                 or md.get("ls_model_name"))
        provider = md.get("ls_provider")
        attrs = {semconv.GEN_AI_OPERATION_NAME: op, semconv.GEN_AI_REQUEST_MODEL: model,
                 semconv.GEN_AI_PROVIDER_NAME: provider, semconv.ASSAY_STEP_KIND: "llm",
                 semconv.ASSAY_FRAMEWORK: FRAMEWORK, semconv.ASSAY_GRAPH_NODE: md.get("langgraph_node")}
        tools = params.get("tools") or params.get("functions")
        if tools:
            attrs[semconv.GEN_AI_TOOL_DEFINITIONS] = (self._cached_json(tools, lambda t: t) if isinstance(tools, list)
                                                      else to_json(tools))
        if content and messages is not None:
            try:
                attrs[semconv.GEN_AI_INPUT_MESSAGES] = to_json(messages)
            except Exception:
                pass
        parent_run = self._runs.get(parent_run_id)
        parent = parent_run.parent if parent_run is not None else None
        if parent is None:  # the context of the start, not of the end
            parent = otel_context.get_current()
        run = _LLMRun(f"{op} {model}" if model else op, attrs, parent, "llm" if model else "llm?",
                      root=parent_run.root if parent_run is not None else None, content=content)
        current = _LLM.get()
        outer = parent_run if isinstance(parent_run, _LLMRun) else _live(current)
        if outer is not None:
            outer.delegated = True
            outer.open_inner += 1
            run.outer = outer
        # one generate() with several prompts starts all its runs before running any
        if kw.get("batch_size", 1) == 1:
            run.prev = current
            _LLM.set(run)
        self._runs[run_id] = run

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, tags=None,
                            metadata=None, **kw):
        if not self.enabled:
            return
        msgs = None
        content = _runtime.capture_content()
        if content:
            try:
                msgs = self._messages_json(messages[0] if messages else [])
            except Exception:
                msgs = None
        self._llm_start(semconv.OP_CHAT, serialized, content, msgs, run_id, parent_run_id, metadata, kw)

    def on_llm_start(self, serialized, prompts, *, run_id, parent_run_id=None, tags=None, metadata=None, **kw):
        if not self.enabled:
            return
        content = _runtime.capture_content()
        msgs = [text_parts("user", p) for p in prompts] if content else None
        self._llm_start(semconv.OP_TEXT_COMPLETION, serialized, content, msgs, run_id, parent_run_id, metadata, kw)

    def on_llm_new_token(self, token, *, run_id, **kw):
        r = self._runs.get(run_id)
        if isinstance(r, _LLMRun) and r.live:
            _release(r)

    def on_stream_event(self, event, *, run_id, **kw):
        self.on_llm_new_token(None, run_id=run_id)

    def on_llm_end(self, response, *, run_id, **kw):
        r = self._runs.pop(run_id, None)
        if r is None:
            return
        _ended(r)
        if r.delegated:
            return
        name = r.name
        gen = None
        try:
            gen = response.generations[0][0]
        except (IndexError, AttributeError, TypeError):
            pass
        msg = getattr(gen, "message", None)
        usage = _mapping(getattr(msg, "usage_metadata", None))
        llm_out = _mapping(getattr(response, "llm_output", None))
        tu = _mapping(llm_out.get("token_usage") or llm_out.get("usage"))
        rmeta = _mapping(getattr(msg, "response_metadata", None))
        ginfo = _mapping(getattr(gen, "generation_info", None))
        in_tok = usage.get("input_tokens", tu.get("prompt_tokens", tu.get("input_tokens")))
        out_tok = usage.get("output_tokens", tu.get("completion_tokens", tu.get("output_tokens")))
        resp_model = rmeta.get("model_name") or rmeta.get("model") or llm_out.get("model_name")
        finish = rmeta.get("finish_reason") or rmeta.get("stop_reason") or ginfo.get("finish_reason")
        calls = (getattr(msg, "tool_calls", None) or []) + (getattr(msg, "invalid_tool_calls", None) or [])
        if not finish:
            finish = "tool_calls" if calls else "stop"
        attrs = {semconv.GEN_AI_USAGE_INPUT_TOKENS: in_tok, semconv.GEN_AI_USAGE_OUTPUT_TOKENS: out_tok,
                 semconv.GEN_AI_RESPONSE_MODEL: resp_model, semconv.GEN_AI_RESPONSE_FINISH_REASONS: [str(finish)],
                 semconv.GEN_AI_RESPONSE_ID: getattr(msg, "id", None) if getattr(msg, "id", None) and
                 not str(msg.id).startswith(("run-", "lc_run")) else None}
        if r.kind == "llm?" and resp_model:
            # the request named no model (fakes, some wrappers): name the span by the response model
            attrs[semconv.GEN_AI_REQUEST_MODEL] = resp_model
            name = f"{name} {resp_model}"
        if r.content:
            try:
                out = _message_json(msg) if msg is not None else text_parts("assistant", getattr(gen, "text", ""))
                attrs[semconv.GEN_AI_OUTPUT_MESSAGES] = to_json([{**out, "finish_reason": str(finish)}])
            except Exception:
                pass
        r.attrs.update(attrs)
        start_span(name, r.attrs, kind=CLIENT, parent=r.parent, start_time=r.start).end()

    def on_llm_error(self, error, *, run_id, **kw):
        r = self._runs.pop(run_id, None)
        if r is not None:
            _ended(r)
            if not r.delegated:
                span = start_span(r.name, r.attrs, kind=CLIENT, parent=r.parent, start_time=r.start)
                if isinstance(error, GeneratorExit):  # the caller stopped reading the stream: not a failure
                    span.end()
                elif isinstance(error, asyncio.CancelledError):
                    fail(span, type_name="CancelledError", message="cancelled before this model call finished")
                else:
                    fail(span, error)

    # ---------------------------------------------------------------- tools
    def on_tool_start(self, serialized, input_str, *, run_id, parent_run_id=None, tags=None, metadata=None,
                      inputs=None, **kw):
        if not self.enabled:
            return
        md = metadata or {}
        ser = serialized or {}
        name = kw.get("name") or ser.get("name") or "tool"
        attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: name,
                 semconv.GEN_AI_TOOL_CALL_ID: kw.get("tool_call_id"), semconv.GEN_AI_TOOL_TYPE: "function",
                 semconv.GEN_AI_TOOL_DESCRIPTION: ser.get("description"), semconv.ASSAY_STEP_KIND: "tool",
                 semconv.ASSAY_FRAMEWORK: FRAMEWORK, semconv.ASSAY_GRAPH_NODE: md.get("langgraph_node")}
        content = _runtime.capture_content()  # for the result too, as for a model call (_llm_start)
        if content:
            attrs[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = args_json(inputs if inputs is not None else input_str)
        parent_run = self._runs.get(parent_run_id)
        span = start_span(f"execute_tool {name}", attrs, parent=parent_run.parent if parent_run is not None else None)
        run = _Run(span, span, kind="tool", root=parent_run.root if parent_run is not None else None)
        run.call_id = kw.get("tool_call_id")
        run.content = content
        # the tool's body runs between this callback and its end, in this context (LangChain
        # copies it for the body after on_tool_start; the handler runs inline): spans the
        # tool makes (other instrumentation, @otel_assay.step) become its children
        run.token = otel_context.attach(trace.set_span_in_context(span))
        self._runs[run_id] = run

    def on_tool_end(self, output, *, run_id, **kw):
        r = self._runs.pop(run_id, None)
        if r is None:
            return
        _detach(r)
        span = r.span
        if type(output).__name__ == "Command":
            output = _tool_message_of_command(output, r.call_id)
        content = getattr(output, "content", output)
        if getattr(output, "tool_call_id", None) and not r.call_id:  # no call id at the start
            span.set_attribute(semconv.GEN_AI_TOOL_CALL_ID, output.tool_call_id)
        if r.content:
            span.set_attribute(semconv.GEN_AI_TOOL_CALL_RESULT,
                               content if type(content) is str else result_text(content))
        if getattr(output, "status", None) == "error":
            fail(span, type_name="ToolError", message=result_text(content))
        else:
            span.end()

    # ---------------------------------------------------------------- retrievers
    def on_retriever_start(self, serialized, query, *, run_id, parent_run_id=None, tags=None, metadata=None,
                           **kw):
        """A retriever's lookup (RAG): a `retrieval` step (kind other), which the agent's
        later steps depend on, so a lookup that starts failing or stops happening shows."""
        if not self.enabled:
            return
        md = metadata or {}
        name = kw.get("name") or (serialized or {}).get("name") or "retriever"
        attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_RETRIEVAL, semconv.GEN_AI_DATA_SOURCE_ID: name,
                 semconv.ASSAY_STEP_KIND: "other", semconv.ASSAY_FRAMEWORK: FRAMEWORK,
                 semconv.ASSAY_GRAPH_NODE: md.get("langgraph_node")}
        if _runtime.capture_content() and query is not None:
            attrs[semconv.GEN_AI_RETRIEVAL_QUERY_TEXT] = str(query)
        parent_run = self._runs.get(parent_run_id)
        parent = parent_run.parent if parent_run is not None else None  # None: the current context
        span = start_span(f"retrieval {name}", attrs, kind=CLIENT, parent=parent)
        root = parent_run.root if parent_run is not None else None
        self._runs[run_id] = _Run(span, span, kind="retrieval", root=root)

    def on_retriever_end(self, documents, *, run_id, **kw):
        r = self._runs.pop(run_id, None)
        if r is None:
            return
        if _runtime.capture_content():
            try:
                docs = [{k: v for k, v in (("id", getattr(d, "id", None)),
                                           ("score", (getattr(d, "metadata", None) or {}).get("score")))
                         if v is not None} for d in (documents or [])]
                r.span.set_attribute(semconv.GEN_AI_RETRIEVAL_DOCUMENTS, to_json(docs))
            except Exception:  # a document type we do not know: the step without its documents
                pass
        r.span.end()

    def on_retriever_error(self, error, *, run_id, **kw):
        r = self._runs.pop(run_id, None)
        if r is not None:
            fail(r.span, error)

    # ---------------------------------------------------------------- graph lifecycle (langgraph)
    def on_interrupt(self, event) -> None:
        """LangGraph paused a graph invocation: interrupt(), or an interrupt_before /
        interrupt_after breakpoint, which no other callback reveals (see ``_graph_callbacks``)."""
        r = self._runs.get(getattr(event, "run_id", None))
        if r is not None and r.root == event.run_id:
            r.interrupted = True

    def on_resume(self, event) -> None:
        pass

    def on_tool_error(self, error, *, run_id, **kw):
        r = self._runs.pop(run_id, None)
        if r is not None:
            _detach(r)
            if type(error).__name__ in _CONTROL_FLOW:  # interrupt() in the tool (a human asked): not a failure
                r.span.end()
            elif isinstance(error, asyncio.CancelledError):
                fail(r.span, type_name="CancelledError", message="cancelled before this tool call finished")
            else:
                fail(r.span, error)


# ---------------------------------------------------------------- instrument
_HANDLER: AssayCallbackHandler | None = None


def handler() -> AssayCallbackHandler:
    global _HANDLER
    if _HANDLER is None:
        _HANDLER = AssayCallbackHandler()
    return _HANDLER


_PREGEL_MAIN = "langgraph.pregel.main"  # its import calls on_module: see the registry's EXTRA_HOOKS
_GRAPH_PATCHES: list = []  # (module, attribute name, original)


def _graph_callbacks(wrapped, instance, args, kwargs):
    """LangGraph hands its lifecycle events (on_interrupt) only to GraphCallbackHandlers found
    in the invocation's ``config["callbacks"]``, never to a handler that a configure hook
    adds, as ours is: the handler joins the graph lifecycle manager here (while instrumented)."""
    manager = wrapped(*args, **kwargs)
    try:
        if _HANDLER is not None and _HANDLER.enabled and _HANDLER not in manager.handlers:
            manager.add_handler(_HANDLER, inherit=False)
    except Exception:  # a LangGraph whose manager differs: breakpoints go unseen, the graph still runs
        pass
    return manager


def on_module(mod) -> None:
    """Registry hook: ``langgraph.pregel.main`` finished importing."""
    if mod.__name__ != _PREGEL_MAIN or _GRAPH_PATCHES:
        return
    for attr in ("get_sync_graph_callback_manager_for_config", "get_async_graph_callback_manager_for_config"):
        orig = getattr(mod, attr)
        setattr(mod, attr, wrapt.FunctionWrapper(orig, _graph_callbacks))
        _GRAPH_PATCHES.append((mod, attr, orig))


def instrument(module=None) -> bool:
    global _VAR
    if _VAR is None:
        _VAR = ContextVar("otel_assay_langchain", default=handler())
        register_configure_hook(_VAR, inheritable=True)
    handler().enabled = True
    _runtime.add_trial_end(handler().end_trial)
    if _PREGEL_MAIN in sys.modules:  # imported before us: the registry's import hook will not fire
        on_module(sys.modules[_PREGEL_MAIN])
    return True


def uninstrument() -> None:
    if _HANDLER is not None:
        _HANDLER.enabled = False
    while _GRAPH_PATCHES:
        mod, attr, orig = _GRAPH_PATCHES.pop()
        setattr(mod, attr, orig)
