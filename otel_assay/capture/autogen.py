"""AutoGen (autogen-core / autogen-agentchat 0.7) adapter.

AutoGen already emits GenAI spans of its own through the global provider (``create_agent``,
``invoke_agent {name}``, ``execute_tool {tool}``), which we keep: our processors are on
that provider, so they carry the trial's ``assay.*`` attributes. We add what they lack:

* ``chat {model}`` spans (CLIENT) with token usage, finish reason, tool definitions and
  messages, by wrapping ``create`` / ``create_stream`` of every ``ChatCompletionClient``
  class in use (OpenAI, Azure, Anthropic, Ollama, Replay, user classes). A client often
  calls another wrapped one: a user subclass whose ``create`` calls ``super().create``,
  a ``create_stream`` built on ``create``, ``ChatCompletionCache`` around a client. Only
  the innermost wrapped call records the span: it is the one that sees the model's own
  name, the messages as sent and the usage as returned, and a wrapper that asks again (a
  retry) makes one model call per attempt. A wrapper that answers without calling a
  wrapped client (a cache hit) records its own span;
* tool arguments and results on AutoGen's own ``execute_tool`` span (scope ``autogen-core``),
  set from inside the tool's ``run`` (or ``run_stream``: ``AgentTool`` and ``TeamTool``,
  agents and teams used as tools), which runs while that span is current and open — one
  tool call is one span, not two;
* a root ``invoke_workflow {team}`` span around a team run (``run`` / ``run_stream`` of
  group chats), which native tracing lacks, so the agents of a group chat share a parent;
* an agent run without a team (``run`` / ``run_stream`` of an agent) records AutoGen's own
  ``invoke_agent`` span as its root, an implicit trial under ``OTEL_ASSAY_SCENARIO``.

A stream (``run_stream``, a client's ``create_stream``) whose reader stops reading (a
``break``) is no failure: the generator is closed with GeneratorExit, or, when ``asyncio.run``
ends right after the break, with the CancelledError of the closing task it cancels. The
workflow span is marked ``assay.incomplete=caller_stopped``; an implicit trial is incomplete
(``caller_stopped``, as in the other adapters), with no verdict.

AutoGen's runtime messaging spans (``autogen publish ...``, ~10 per step, not steps) are
switched off by setting ``AUTOGEN_DISABLE_RUNTIME_TRACING=true`` unless the environment
already sets it.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import sys
import warnings

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from .. import semconv
from . import _runtime
from ._spans import (CLIENT, DeferredCall, args_json, chat_attributes, fail, result_text, start_span, text_parts,
                     to_json, tool_call_part)
from .trial import await_in_trial, implicit_trial

FRAMEWORK = "autogen"
_PATCHES: list = []
_PATCHED: set = set()  # (owner, attr) of _PATCHES
_WRAPPED_CLIENTS: set = set()
_TOOL_CALL: contextvars.ContextVar = contextvars.ContextVar("otel_assay_autogen_tool", default=None)
_CALL: contextvars.ContextVar = contextvars.ContextVar("otel_assay_autogen_chat", default=None)


# ------------------------------------------------------------------ model clients
def _model_name(client) -> str:
    """The model a client calls, for the span name and ``gen_ai.request.model``. AutoGen's
    clients keep it in their component configuration (the arguments the user gave them),
    which ``dump_component()`` returns; a user client may instead expose ``model``. A client
    with neither is named by its model family, else by its class."""
    for attr in ("model", "model_name"):
        v = getattr(client, attr, None)
        if isinstance(v, str) and v:
            return v
    try:
        with warnings.catch_warnings():  # dumping warns about the user's module names, not ours to report
            warnings.simplefilter("ignore")
            config = client.dump_component().config
    except Exception:  # not a component (a duck-typed client, a class defined in a function)
        config = None
    if isinstance(config, dict) and isinstance(config.get("model"), str) and config["model"]:
        return config["model"]
    info = getattr(client, "model_info", None) or {}
    fam = info.get("family") if isinstance(info, dict) else None
    if fam and fam != "unknown":
        return str(fam)
    return type(client).__name__


def _provider(client) -> str:
    # a user subclass (a logging or retrying client) is named after the user, not the provider
    for cls in type(client).__mro__:
        n = cls.__name__
        for key, prov in (("AzureOpenAI", "azure.ai.openai"), ("AzureAI", "azure.ai.inference"), ("OpenAI", "openai"),
                          ("Anthropic", "anthropic"), ("Ollama", "ollama"), ("Gemini", "gcp.gemini"),
                          ("Replay", "replay"), ("LlamaCpp", "llama_cpp")):
            if key in n:
                return prov
    return type(client).__name__.lower()


def _tool_defs(tools) -> list:
    out = []
    for t in tools or []:
        schema = getattr(t, "schema", t)
        out.append(dict(schema) if isinstance(schema, dict) else str(schema))
    return out


def _msgs(messages) -> list:
    out = []
    for m in messages or []:
        kind = type(m).__name__
        role = {"SystemMessage": "system", "UserMessage": "user", "AssistantMessage": "assistant",
                "FunctionExecutionResultMessage": "tool"}.get(kind, "user")
        content = getattr(m, "content", None)
        if role == "tool" and isinstance(content, list):
            out.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": getattr(r, "call_id", None),
                                                   "result": getattr(r, "content", None)} for r in content]})
        elif isinstance(content, list) and content and hasattr(content[0], "arguments"):
            out.append({"role": role, "parts": [tool_call_part(c.id, c.name, c.arguments) for c in content]})
        else:
            out.append(text_parts(role, content if isinstance(content, (str, list)) else str(content)))
    return out


def _chat_start(client, messages, kwargs, start_time, parent):
    model = _model_name(client)
    tools = kwargs.get("tools")
    attrs = chat_attributes(FRAMEWORK, model, _provider(client), (lambda: _tool_defs(tools)) if tools else None,
                            lambda: _msgs(messages))
    return start_span(f"chat {model}", attrs, kind=CLIENT, parent=parent, start_time=start_time)


def _chat_end(span, result) -> None:
    usage = getattr(result, "usage", None)
    finish = getattr(result, "finish_reason", None)
    content = getattr(result, "content", None)
    attrs = {semconv.GEN_AI_RESPONSE_FINISH_REASONS: [str(finish)] if finish else None,
             semconv.GEN_AI_USAGE_INPUT_TOKENS: getattr(usage, "prompt_tokens", None),
             semconv.GEN_AI_USAGE_OUTPUT_TOKENS: getattr(usage, "completion_tokens", None)}
    if getattr(result, "cached", False) is True:
        # answered from a response cache (ChatCompletionCache): the usage it carries is the
        # original call's, but this call sent nothing to a model and cost nothing
        attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = 0
        attrs[semconv.ASSAY_CACHE_HIT] = True
    if _runtime.capture_content():
        if isinstance(content, list):
            m = {"role": "assistant", "parts": [tool_call_part(c.id, c.name, c.arguments) for c in content]}
        else:
            m = text_parts("assistant", content)
        m["finish_reason"] = str(finish)
        attrs[semconv.GEN_AI_OUTPUT_MESSAGES] = to_json([m])
    span.set_attributes({k: v for k, v in attrs.items() if v is not None})
    span.end()


class _Call(DeferredCall):
    """One wrapped ``create`` / ``create_stream`` call (``target``: the client)."""

    __slots__ = ()

    def end(self, result=None, exc=None) -> None:
        if self.delegated:
            return
        span = _chat_start(self.target, self.messages, self.kwargs, self.start, self.parent)
        if exc is not None:
            fail(span, exc)
        elif result is not None:
            _chat_end(span, result)
        else:
            span.end()


async def _create(wrapped, instance, args, kwargs):
    call = _Call(_CALL, instance, args, kwargs)
    token = _CALL.set(call)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as e:
        call.end(exc=e)
        raise
    finally:
        _CALL.reset(token)
    call.end(result)
    return result


async def _marked(agen, var: contextvars.ContextVar, value):
    """The items of ``agen``, with ``var`` set to ``value`` only while ``agen``'s own code
    runs: between items the consumer's code is not part of the call, and a token must be
    reset where it was set."""
    agen = agen.__aiter__()
    while True:
        token = var.set(value)
        try:
            item = await agen.__anext__()
        except StopAsyncIteration:
            return
        finally:
            var.reset(token)
        yield item


def _create_stream(wrapped, instance, args, kwargs):
    async def gen():
        call = _Call(_CALL, instance, args, kwargs)
        last, stopped = None, False
        try:
            async for item in _marked(wrapped(*args, **kwargs), _CALL, call):
                last = item
                try:
                    yield item
                except _READER_STOPPED:
                    stopped = True
                    raise
        except BaseException as e:
            # a reader that stopped (a break) ended no model call in error
            call.end(exc=None if stopped else e)
            raise
        call.end(last if type(last).__name__ == "CreateResult" else None)
    return gen()


def _wrap_client_class(cls) -> None:
    if cls in _WRAPPED_CLIENTS:
        return
    _WRAPPED_CLIENTS.add(cls)
    if "create" in cls.__dict__ and not getattr(cls.__dict__["create"], "__isabstractmethod__", False):
        _patch(cls, "create", _create)
    if "create_stream" in cls.__dict__ and not getattr(cls.__dict__["create_stream"], "__isabstractmethod__", False):
        _patch(cls, "create_stream", _create_stream)


def _wrap_clients(client=None) -> None:
    """Wrap every ChatCompletionClient class defined by now, and the classes of ``client``
    (AutoGen does not check that an agent's client subclasses it). All of them, so that the
    client an agent's client delegates to (the one ChatCompletionCache holds) is wrapped
    whatever the import order: its call is the innermost, the one that records."""
    from autogen_core.models import ChatCompletionClient
    for cls in type(client).__mro__ if client is not None else ():
        if cls is ChatCompletionClient:
            break
        _wrap_client_class(cls)
    for cls in list(_all_subclasses(ChatCompletionClient)):
        _wrap_client_class(cls)


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


# ------------------------------------------------------------------ tools
# AutoGen's ``run_json`` opens its ``execute_tool`` span (through the global provider: ours)
# and calls the tool's ``run`` while that span is current and open; ``run_json_stream`` does
# the same around ``run_stream``. So the arguments and the result are set on the current span
# from inside ``run``: one tool call stays one span, AutoGen's, completed by us. ``run_json``
# is wrapped too, to hand the arguments as the model sent them (``run`` gets them validated,
# defaults filled in) and to wrap the ``run`` of the tool's class on its first call, whatever
# module defined it and whenever.
class _ToolCall:
    """A ``run_json`` call whose span ``run`` has yet to complete. ``outer`` is the span that
    was current before AutoGen opened the tool's: a ``run`` that finds it still current was
    called without a span of AutoGen's, and leaves it alone. ``taken``: a ``run`` calling its
    base class's ``run`` (both wrapped) completes the span once, in the outermost."""

    __slots__ = ("args", "outer", "taken")

    def __init__(self, args):
        self.args, self.outer, self.taken = args, trace.get_current_span(), False


def _tool_span():
    """The current span, if it is the one AutoGen opened for this pending ``run_json`` call,
    with what AutoGen's own span lacks set on it; else None."""
    call = _TOOL_CALL.get()
    span = trace.get_current_span()
    if call is None or call.taken or span is call.outer or not span.is_recording():
        return None
    call.taken = True
    span.set_attributes({semconv.GEN_AI_TOOL_TYPE: "function", semconv.ASSAY_STEP_KIND: "tool",
                         semconv.ASSAY_FRAMEWORK: FRAMEWORK})
    if _runtime.capture_content():
        span.set_attribute(semconv.GEN_AI_TOOL_CALL_ARGUMENTS, args_json(dict(call.args or {})))
    return span


def _tool_result(span, instance, result) -> None:
    if _runtime.capture_content():
        try:
            text = instance.return_value_as_string(result)
        except Exception:  # the tool's conversion failed, not its call: record the value as it is
            text = result_text(result)
        span.set_attribute(semconv.GEN_AI_TOOL_CALL_RESULT, text)


def _tool_cancelled(span, e: BaseException) -> None:
    """AutoGen's span records an Exception itself, not a BaseException: a tool cancelled
    (the run timed out or was stopped) would end as a success. A span a late close of the
    generator finds already ended is left as it is."""
    if isinstance(e, Exception) or not span.is_recording():
        return
    span.record_exception(e)
    span.set_status(Status(StatusCode.ERROR, str(e)))
    span.set_attribute(semconv.ERROR_TYPE, type(e).__name__)


async def _tool_run(wrapped, instance, args, kwargs):
    span = _tool_span()
    if span is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as e:
        _tool_cancelled(span, e)
        raise
    _tool_result(span, instance, result)
    return result


def _tool_run_stream(wrapped, instance, args, kwargs):
    """``run_stream`` is called inside AutoGen's span, the stream read there to its end: the
    last item is the tool's return value."""
    span = _tool_span()
    agen = wrapped(*args, **kwargs)
    return agen if span is None else _completing(agen, span, instance)


async def _completing(agen, span, instance):
    last = None
    try:
        async for item in agen:
            last = item
            yield item
    except BaseException as e:
        _tool_cancelled(span, e)
        raise
    _tool_result(span, instance, last)


def _wrap_tool_class(tool, attr, wrapper) -> None:
    """Wrap ``attr`` once, where the tool's class finds it: in the nearest class defining it."""
    for cls in type(tool).__mro__:
        if attr in cls.__dict__:
            if (cls, attr) not in _PATCHED:
                _patch(cls, attr, wrapper)
            return


async def _run_json(wrapped, instance, args, kwargs):
    _runtime.pipeline()  # before AutoGen opens its span: a no-op span has nothing to complete
    _wrap_tool_class(instance, "run", _tool_run)
    token = _TOOL_CALL.set(_ToolCall(args[0] if args else kwargs.get("args")))
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _TOOL_CALL.reset(token)


def _run_json_stream(wrapped, instance, args, kwargs):
    """``run_json_stream`` (how AssistantAgent runs a stream tool: ``AgentTool``, ``TeamTool``)."""
    async def gen():
        _runtime.pipeline()
        _wrap_tool_class(instance, "run_stream", _tool_run_stream)
        call = _ToolCall(args[0] if args else kwargs.get("args"))
        async for item in _marked(wrapped(*args, **kwargs), _TOOL_CALL, call):
            yield item
    return gen()


# ------------------------------------------------------------------ teams
# what a stream's reader throws in at its yield when it stops reading: GeneratorExit (aclose()
# after a break), or CancelledError when asyncio.run ends before that aclose() ran (the event
# loop closes an abandoned generator in a task, and cancels the tasks left when it stops)
_READER_STOPPED = (GeneratorExit, asyncio.CancelledError)


async def _in_context(agen, ctx, *, carry: bool = False):
    """The items of ``agen``, each step of it run in ``ctx`` and the consumer's code between
    them in its own context. With ``carry`` the context a step leaves current is the next
    step's ``ctx``."""
    while True:
        token = otel_context.attach(ctx)
        try:
            item = await agen.__anext__()
        except StopAsyncIteration:
            return
        finally:
            if carry:
                ctx = otel_context.get_current()
            otel_context.detach(token)
        yield item


def _run_stream(wrapped, instance, args, kwargs):
    async def gen():
        name = getattr(instance, "name", None) or type(instance).__name__
        t = implicit_trial(name)
        attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_WORKFLOW, semconv.GEN_AI_WORKFLOW_NAME: name,
                 semconv.ASSAY_STEP_KIND: "workflow", semconv.ASSAY_FRAMEWORK: FRAMEWORK}
        task = kwargs.get("task", args[0] if args else None)
        if _runtime.capture_content() and isinstance(task, str):
            attrs[semconv.GEN_AI_INPUT_MESSAGES] = to_json([text_parts("user", task)])
        span = start_span(f"invoke_workflow {name}", attrs, parent=t.span if t else None)
        last, stopped = None, False
        try:
            async for item in _in_context(wrapped(*args, **kwargs), trace.set_span_in_context(span)):
                last = item
                try:
                    yield item
                except _READER_STOPPED:
                    stopped = True
                    raise
        except BaseException as e:
            if stopped:  # the consumer stopped reading (a break out of the loop): no error of the team
                span.set_attribute(semconv.ASSAY_INCOMPLETE, "caller_stopped")
                span.end()
            else:
                fail(span, e)
            if t is not None:
                t.finish(None if stopped else e, incomplete="caller_stopped" if stopped else None)
            raise
        stop = getattr(last, "stop_reason", None)
        if stop:
            span.set_attribute("assay.workflow.stop_reason", str(stop))
        span.end()
        if t is not None:
            t.finish()
    return gen()


# ------------------------------------------------------------------ single agents
# An agent run on its own (``agent.run`` / ``agent.run_stream``; a team calls the agents'
# ``on_messages_stream`` instead): AutoGen's own ``invoke_agent`` span is its first span.
# The pipeline is installed before it starts: outside a trial, in a process whose global
# provider is still OpenTelemetry's proxy, that span was a no-op, and the first run's chat and
# tool spans became the roots of traces of their own. Under OTEL_ASSAY_SCENARIO the run is an
# implicit trial, as a team run is.
async def _agent_run(wrapped, instance, args, kwargs):
    _runtime.pipeline()
    return await await_in_trial(implicit_trial(getattr(instance, "name", None), attach=True), wrapped, *args, **kwargs)


def _agent_run_stream(wrapped, instance, args, kwargs):
    async def gen():
        _runtime.pipeline()
        t = implicit_trial(getattr(instance, "name", None))
        agen = wrapped(*args, **kwargs)
        if t is None:
            async for item in agen:
                yield item
            return
        stopped = False
        try:
            # AutoGen's invoke_agent span stays current across the generator's yields: its
            # next step runs in what it left current, the consumer in its own context
            async for item in _in_context(agen, trace.set_span_in_context(t.span), carry=True):
                try:
                    yield item
                except _READER_STOPPED:
                    stopped = True
                    raise
        except BaseException as e:
            # the consumer stopped reading: no failure of the agent, and no complete run either
            t.finish(None if stopped else e, incomplete="caller_stopped" if stopped else None)
            raise
        t.finish()
    return gen()


def _client_init(wrapped, instance, args, kwargs):
    """The constructor of a class given a ``model_client`` (AssistantAgent; SelectorGroupChat's
    speaker selection and MagenticOne's orchestrator, a team's own client that is no agent's):
    the client's classes are wrapped as the user gave the client, since AutoGen does not
    check that a client subclasses ChatCompletionClient."""
    out = wrapped(*args, **kwargs)
    try:
        client = inspect.signature(wrapped).bind_partial(*args, **kwargs).arguments.get("model_client")
    except TypeError:  # the constructor accepted arguments its signature does not name
        client = None
    if client is not None:
        _wrap_clients(client)
    return out


# ------------------------------------------------------------------ instrument
def _patch(owner, attr, wrapper) -> None:
    import wrapt
    orig = owner.__dict__[attr]
    setattr(owner, attr, wrapt.FunctionWrapper(orig, wrapper))
    _PATCHES.append((owner, attr, orig))
    _PATCHED.add((owner, attr))


def _agentchat_patches(mod) -> list:
    """(class, method, wrapper) to patch in a public autogen_agentchat package. The classes
    are taken from the public package, never from the private modules defining them: a
    patch on a class object holds wherever AutoGen moves its definition."""
    if mod.__name__ == "autogen_agentchat.agents":
        return [(mod.BaseChatAgent, "run", _agent_run), (mod.BaseChatAgent, "run_stream", _agent_run_stream),
                (mod.AssistantAgent, "__init__", _client_init)]
    out = [(mod.BaseGroupChat, "run_stream", _run_stream)]
    for name in getattr(mod, "__all__", ()):
        cls = getattr(mod, name, None)
        if (isinstance(cls, type) and issubclass(cls, mod.BaseGroupChat) and "__init__" in cls.__dict__
                and "model_client" in inspect.signature(cls.__init__).parameters):
            out.append((cls, "__init__", _client_init))
    return out


_AGENTCHAT = ("autogen_agentchat.agents", "autogen_agentchat.teams")  # patched once imported


def _imported(mod) -> bool:
    """Whether a package has finished importing: every name of its ``__all__`` is bound.
    Importing autogen_core, the adapter's trigger, from inside an agentchat package runs
    instrument() while that package is half-imported; its import hook patches it later."""
    names = getattr(mod, "__all__", None)
    return bool(names) and all(hasattr(mod, n) for n in names)


def _patch_agentchat_module(mod) -> None:
    if not _PATCHES or not _imported(mod):  # uninstrumented meanwhile, or still importing
        return
    for cls, attr, wrapper in _agentchat_patches(mod):
        if (cls, attr) not in _PATCHED:
            _patch(cls, attr, wrapper)


def _patch_tools() -> None:
    from autogen_core import tools
    _patch(tools.BaseTool, "run_json", _run_json)
    _patch(tools.BaseStreamTool, "run_json_stream", _run_json_stream)


def instrument(module=None) -> bool:
    if _PATCHES:
        return True
    os.environ.setdefault("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")
    _patch_tools()
    _wrap_clients()
    # agentchat packages imported already are patched now; the registry registered import
    # hooks for the others (registering them here could catch a package half-imported)
    for name in _AGENTCHAT:
        mod = sys.modules.get(name)
        if mod is not None:
            _patch_agentchat_module(mod)
    return True


def on_module(mod) -> None:
    """Registry hook: an autogen_agentchat module the registry lists for us finished importing."""
    if mod.__name__ in _AGENTCHAT:
        _patch_agentchat_module(mod)


def uninstrument() -> None:
    while _PATCHES:
        owner, attr, orig = _PATCHES.pop()
        setattr(owner, attr, orig)
    _PATCHED.clear()
    _WRAPPED_CLIENTS.clear()
