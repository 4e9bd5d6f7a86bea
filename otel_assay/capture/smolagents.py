"""smolagents adapter (ToolCallingAgent, CodeAgent, managed agents).

Wraps (with wrapt, on the classes, so agents created before or after instrumenting are
covered):

* ``MultiStepAgent.run`` -> ``invoke_agent {name}`` (current context while it runs, so a
  managed agent called as a tool nests under the calling ``execute_tool`` span);
  streaming runs (``stream=True``) keep the span open while the generator is consumed;
* a planning step (``planning_interval``) -> ``plan {name}`` (a reason step), opened by the
  agent's model call that writes the plan (its child) and ended by the ``PlanningStep``
  smolagents reports (a step callback, or an item of a streamed run);
* ``generate`` / ``generate_stream`` of every ``Model`` class in use (built-in, user
  subclasses, the class of an agent's model) -> ``chat {model_id}`` with token usage, tool
  definitions, finish reason, input/output messages. A model often calls another wrapped
  one: a ``generate_stream`` built on ``self.generate``, a subclass's ``generate`` calling
  ``super().generate``, a model around another model. Only the innermost wrapped call
  records the span: it is the one that sees the model's own id, the messages as sent and
  the usage as returned. A model that answers without calling a wrapped one (a cache hit)
  records its own span;
* ``ToolCallingAgent.execute_tool_call`` -> ``execute_tool {tool}`` with the model's call
  id, arguments and result; ``Tool.__call__`` outside that (CodeAgent code calling tools)
  -> ``execute_tool {tool}`` without a call id, and likewise ``MultiStepAgent.__call__``
  (CodeAgent code calling a managed agent: the delegation is a tool call either way). The
  ``final_answer`` tool is marked as the respond step (``assay.step.kind=respond``).

A step smolagents catches and reports on its ``ActionStep.error`` (the run goes on) leaves a
failed step, read from a step callback registered on each agent (``_on_action_step``). A
run that ends because it reached ``max_steps`` returns the answer the model writes after
that: its agent span fails with ``AgentMaxStepsError`` (see ``_end_agent``).
"""

from __future__ import annotations

import contextvars
import threading
import time
import weakref

from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import semconv
from . import _runtime
from ._spans import (CLIENT, DeferredCall, args_json, chat_attributes, fail, result_text, start_span, text_parts,
                     to_json, tool_call_part)
from .trial import implicit_trial

FRAMEWORK = "smolagents"
_IN_TOOL: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_assay_smol_in_tool", default=False)
_CALL: contextvars.ContextVar = contextvars.ContextVar("otel_assay_smol_chat", default=None)
_PATCHES: list = []  # (owner, attribute name, original)
_WRAPPED_MODELS: set = set()
_RUN: contextvars.ContextVar = contextvars.ContextVar("otel_assay_smol_run", default=None)
# smolagents classes the step callback tests against (set by instrument)
_ACTION_STEP = _PLANNING_STEP = _EXECUTION_ERROR = _MAX_STEPS_ERROR = None


def _agent_name(agent) -> str:
    return getattr(agent, "name", None) or type(agent).__name__


def _provider(model) -> str:
    n = type(model).__name__
    # AzureOpenAI before OpenAI: the first key contained in the class name wins
    for key, prov in (("AzureOpenAI", "azure.ai.openai"), ("OpenAI", "openai"), ("LiteLLM", "litellm"),
                      ("InferenceClient", "huggingface"), ("Transformers", "transformers"), ("Bedrock", "aws.bedrock"),
                      ("VLLM", "vllm"), ("MLX", "mlx")):
        if key in n:
            return prov
    return n.lower()


def _messages_json(messages) -> list:
    out = []
    for m in messages or []:
        role = getattr(m, "role", None) or (m.get("role") if isinstance(m, dict) else "user")
        role = getattr(role, "value", role)
        content = getattr(m, "content", None) if not isinstance(m, dict) else m.get("content")
        out.append(text_parts(str(role), content))
    return out


def _tool_defs(tools) -> list:
    defs = []
    for t in tools or []:
        defs.append({"type": "function", "name": getattr(t, "name", str(t)),
                     "description": getattr(t, "description", None),
                     "parameters": getattr(t, "inputs", None)})
    return defs


def _attached(span):
    return otel_context.attach(trace.set_span_in_context(span))


# ------------------------------------------------------------------ model wrapping
def _chat_finish(span, msg) -> None:
    usage = getattr(msg, "token_usage", None)
    calls = getattr(msg, "tool_calls", None) or []
    finish = "tool_calls" if calls else "stop"
    attrs = {semconv.GEN_AI_RESPONSE_FINISH_REASONS: [finish],
             semconv.GEN_AI_RESPONSE_MODEL: getattr(msg, "model", None) if isinstance(getattr(msg, "model", None), str) else None}
    if usage is not None:
        attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = getattr(usage, "input_tokens", None)
        attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = getattr(usage, "output_tokens", None)
    if _runtime.capture_content():
        content = getattr(msg, "content", None)
        m = text_parts("assistant", content) if content else {"role": "assistant", "parts": []}
        for c in calls:
            f = getattr(c, "function", None)
            m["parts"].append(tool_call_part(getattr(c, "id", None), getattr(f, "name", None), getattr(f, "arguments", None)))
        m["finish_reason"] = finish
        attrs[semconv.GEN_AI_OUTPUT_MESSAGES] = to_json([m])
    span.set_attributes({k: v for k, v in attrs.items() if v is not None})


def _stream_finish(span, result) -> None:
    inp, out, text = result
    span.set_attributes({semconv.GEN_AI_USAGE_INPUT_TOKENS: inp, semconv.GEN_AI_USAGE_OUTPUT_TOKENS: out})
    if _runtime.capture_content():
        span.set_attribute(semconv.GEN_AI_OUTPUT_MESSAGES, to_json([text_parts("assistant", text)]))


class _Call(DeferredCall):
    """One wrapped ``generate`` / ``generate_stream`` call (``target``: the model)."""

    __slots__ = ()

    def _span(self):
        model = self.target
        mid = getattr(model, "model_id", None) or type(model).__name__
        tools = self.kwargs.get("tools_to_call_from")
        attrs = chat_attributes(FRAMEWORK, mid, _provider(model), (lambda: _tool_defs(tools)) if tools else None,
                                lambda: _messages_json(self.messages))
        return start_span(f"chat {mid}", attrs, kind=CLIENT, parent=self.parent, start_time=self.start)

    def end(self, finish, result) -> None:
        if not self.delegated:
            span = self._span()
            finish(span, result)
            run = _RUN.get()
            if run is not None and trace.get_current_span(self.parent) is run.span:
                run.hold(span)  # the agent's own model call: its step may still reject the answer
            else:
                span.end()

    def fail(self, exc) -> None:
        if not self.delegated:
            fail(self._span(), exc)


def _generate(wrapped, instance, args, kwargs):
    plan = _plan_span(instance)
    ptoken = _attached(plan) if plan is not None else None
    try:
        call = _Call(_CALL, instance, args, kwargs)
        token = _CALL.set(call)
        try:
            msg = wrapped(*args, **kwargs)
        except BaseException as e:
            call.fail(e)
            raise
        finally:
            _CALL.reset(token)
    finally:
        if ptoken is not None:
            otel_context.detach(ptoken)
    call.end(_chat_finish, msg)
    return msg


def _generate_stream(wrapped, instance, args, kwargs):
    def gen():
        plan = _plan_span(instance)
        ptoken = _attached(plan) if plan is not None else None
        try:
            call = _Call(_CALL, instance, args, kwargs)
        finally:
            if ptoken is not None:
                otel_context.detach(ptoken)
        inp = out = 0
        text = []
        deltas = None
        try:
            while True:
                # marked only while the model's own code runs: between deltas the agent's
                # code is not part of this call, and a token must be reset where it was set.
                # The call itself too: a generate_stream that is no generator function runs
                # its code when called
                ptoken = _attached(plan) if plan is not None else None
                token = _CALL.set(call)
                try:
                    if deltas is None:
                        deltas = iter(wrapped(*args, **kwargs))
                    delta = next(deltas)
                except StopIteration:
                    break
                finally:
                    _CALL.reset(token)
                    if ptoken is not None:
                        otel_context.detach(ptoken)
                u = getattr(delta, "token_usage", None)
                if u is not None:
                    inp += u.input_tokens or 0
                    out += u.output_tokens or 0
                if getattr(delta, "content", None):
                    text.append(delta.content)
                yield delta
        except GeneratorExit:
            # the consumer stopped reading (a break out of a streamed run): not a failed call;
            # it records what was streamed so far
            call.end(_stream_finish, (inp, out, "".join(text)))
            raise
        except BaseException as e:
            call.fail(e)
            raise
        call.end(_stream_finish, (inp, out, "".join(text)))
    return gen()


def _wrap_model_class(cls) -> None:
    if cls in _WRAPPED_MODELS:
        return
    _WRAPPED_MODELS.add(cls)
    for attr, wrapper in (("generate", _generate), ("generate_stream", _generate_stream)):
        if callable(cls.__dict__.get(attr)):
            _patch(cls, attr, wrapper)


def _wrap_models(model=None) -> None:
    """Wrap every Model class defined by now, and the classes of ``model`` (an agent's model
    need not subclass Model). All of them, so that the model another model calls is wrapped
    though no agent uses it: its call is the innermost, the one that records."""
    from smolagents.models import Model
    for cls in type(model).__mro__[:-1] if model is not None else ():
        _wrap_model_class(cls)
    for cls in list(_all_subclasses(Model)):
        _wrap_model_class(cls)


def _all_subclasses(cls):
    yield cls
    for sub in cls.__subclasses__():
        yield from _all_subclasses(sub)


# ------------------------------------------------------------------ agent / plan / tools
class _Run:
    """One ``run`` of an agent, as its steps see it (``_RUN`` while the agent's code runs).

    smolagents reports a failed step only on its ``ActionStep`` (``error``), when the step
    is over and the run goes on: a model answer that cannot be parsed, code that raises, a
    tool that fails. The answer of the agent's own model call (``chat``) is therefore held,
    its span not ended, until the step it belongs to is finalised (``_on_action_step``): a
    step that rejects the answer marks that call failed; otherwise it ends as it was, at
    its own end time."""

    __slots__ = ("agent", "span", "chat", "chat_end", "tool_failed", "max_steps", "ended", "plan", "planned",
                 "__weakref__")

    def __init__(self, agent, span):
        self.agent, self.span = agent, span
        self.plan = None          # the open ``plan`` span (see _plan_span)
        self.planned = None       # the step number whose planning step has ended
        self.chat = self.chat_end = None
        self.tool_failed = False  # a step span of the current ActionStep already failed
        self.max_steps = None     # the AgentMaxStepsError the run ended with
        self.ended = False        # its agent span has ended (see _end_agent)

    def hold(self, span) -> None:
        if self.ended:  # a stream read on after its trial ended it: nothing would release the call
            span.end()
            return
        self.release()
        self.chat, self.chat_end = span, time.time_ns()

    def release(self, exc=None) -> int | None:
        """End the held model call (failed by ``exc`` if given); returns its end time."""
        span, end = self.chat, self.chat_end
        if span is not None:
            self.chat = None
            if exc is None:
                span.end(end_time=end)
            else:
                fail(span, exc, end_time=end)
        return end if span is not None else None


def _enter(run):
    return _attached(run.span), _RUN.set(run)


def _leave(tokens) -> None:
    _RUN.reset(tokens[1])
    otel_context.detach(tokens[0])


def _watch_steps(agent) -> None:
    """Register ``_on_action_step`` once per agent (and again if its registry is replaced)."""
    reg = getattr(agent, "step_callbacks", None)
    d = getattr(agent, "__dict__", None)
    if reg is None or d is None or d.get("_otel_assay_steps") is reg:
        return
    reg.register(_ACTION_STEP, _on_action_step)
    reg.register(_PLANNING_STEP, _on_planning_step)
    d["_otel_assay_steps"] = reg


def _on_action_step(step, agent=None) -> None:
    """An ActionStep is finalised (smolagents' step callback). Its ``error`` is recorded on
    the one step it is about, unless a step span of it already failed (a tool that raised,
    in a ToolCallingAgent's call or in a CodeAgent's code):

    * ``AgentExecutionError`` from a CodeAgent's code (``code_action`` parsed, then running
      it raised): a failed ``execute_tool python_interpreter`` step. smolagents itself
      records the code action as a tool call of that name (``ActionStep.tool_calls``); a
      code action that runs cleanly is recorded only through the tools its code calls;
    * anything else (``AgentParsingError``: no tool call or code block could be read from
      the model's answer; a ToolCallingAgent's answer breaking the protocol, such as a final
      answer next to other tool calls; a final answer check that failed): the step's model
      call, whose answer the agent could not use;
    * ``AgentMaxStepsError`` is no step's failure: the run's (see ``_end_agent``)."""
    run = _RUN.get()
    if run is None or run.agent is not agent or not isinstance(step, _ACTION_STEP):
        return
    err = getattr(step, "error", None)
    tool_failed, run.tool_failed = run.tool_failed, False
    if err is None or tool_failed:
        run.release()
    elif isinstance(err, _MAX_STEPS_ERROR):
        run.max_steps = err
        run.release()
    elif isinstance(err, _EXECUTION_ERROR) and getattr(step, "code_action", None) is not None:
        start = run.release()
        if start is None:
            timing = getattr(step, "timing", None)
            start = int(timing.start_time * 1e9) if getattr(timing, "start_time", None) else None
        calls = getattr(step, "tool_calls", None) or []
        call = calls[0] if calls else None
        span = _tool_span(getattr(call, "name", None) or "python_interpreter", step.code_action,
                          getattr(call, "id", None), parent=run.span, start_time=start)
        fail(span, err)
    elif run.chat is not None:
        run.release(err)
    else:  # no model call of the agent's to blame (a custom step): at least on the agent
        run.span.record_exception(err)


def _agent_span(agent, task):
    name = _agent_name(agent)
    attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: name,
             semconv.GEN_AI_AGENT_DESCRIPTION: getattr(agent, "description", None),
             semconv.GEN_AI_REQUEST_MODEL: getattr(getattr(agent, "model", None), "model_id", None),
             semconv.ASSAY_STEP_KIND: "agent", semconv.ASSAY_FRAMEWORK: FRAMEWORK}
    if _runtime.capture_content() and task is not None:
        attrs[semconv.GEN_AI_INPUT_MESSAGES] = to_json([text_parts("user", task)])
    t = implicit_trial(name)
    return start_span(f"invoke_agent {name}", attrs, parent=t.span if t else None), t


# streamed runs whose generator has not ended yet; a trial that ends ends them (_trial_end).
# Weak: a generator dropped before its first item never runs its end, and must not keep its
# agent alive here
_OPEN_STREAMS: weakref.WeakSet = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()


def _trial_end(trace_id: int, exc) -> None:
    """A trial ends with a streamed run of it still open: its reader stopped without closing
    the generator (kept in a variable past the trial), or never started reading. The run ends
    here as when its reader breaks out of the loop; else its agent span, and the model call
    it holds (tokens, cost), would end after the trial, or never (a generator closed only at
    interpreter exit)."""
    with _OPEN_LOCK:
        runs = [r for r in list(_OPEN_STREAMS) if r.span.get_span_context().trace_id == trace_id]
    for run in runs:
        _end_agent(run, None)


def _end_agent(run, t, output=None, exc=None):
    with _OPEN_LOCK:
        if run.ended:  # ended by its trial; the generator closed later
            return
        run.ended = True
        _OPEN_STREAMS.discard(run)
    span = run.span
    _end_plan(run, exc=exc)  # a plan cut short: its model call raised, or the reader stopped
    run.release()  # an answer still held: its step was cut short (the run raised, or its reader stopped)
    if exc is not None:
        fail(span, exc)
    else:
        if _runtime.capture_content() and output is not None:
            out = getattr(output, "output", output)
            span.set_attribute(semconv.GEN_AI_OUTPUT_MESSAGES, to_json([text_parts("assistant", result_text(out))]))
        if run.max_steps is not None:
            # the run returns normally, with an answer the model wrote once the agent was out of
            # steps (smolagents' RunResult.state "max_steps_error"): the agent did not finish its task
            fail(span, run.max_steps)
        else:
            span.end()
    if t is not None:
        if exc is None and run.max_steps is not None:
            # counted as a failure, whether or not a tool call was made (unlike a timeout)
            t.outcome(passed=False, error_class="max-steps")
        t.finish(exc)


def _run(wrapped, instance, args, kwargs):
    task = args[0] if args else kwargs.get("task")
    stream = kwargs.get("stream", args[1] if len(args) > 1 else False)
    _wrap_models(getattr(instance, "model", None))
    _watch_steps(instance)
    span, t = _agent_span(instance, task)
    run = _Run(instance, span)
    tokens = _enter(run)
    try:
        out = wrapped(*args, **kwargs)  # a streamed run: its generator, not run yet
    except BaseException as e:
        _leave(tokens)
        _end_agent(run, t, exc=e)
        raise
    _leave(tokens)
    if not stream:
        _end_agent(run, t, out)
        return out
    with _OPEN_LOCK:
        _OPEN_STREAMS.add(run)
    return _traced_gen(out, run, lambda out, exc: _end_agent(run, t, out, exc))


def _traced_gen(gen, run, on_end):
    last = None
    try:
        while True:
            tokens = _enter(run)
            try:
                item = next(gen)
            except StopIteration:
                break
            finally:
                _leave(tokens)
            last = item
            if run.plan is not None and isinstance(item, _PLANNING_STEP):
                _end_plan(run, item)  # a streamed run yields its planning step before finalising it
            yield item
    except GeneratorExit:
        # the consumer stopped iterating (a break out of the loop): not an error of the agent
        on_end(None, None)
        raise
    except BaseException as e:
        on_end(None, e)
        raise
    on_end(getattr(last, "output", None) if type(last).__name__ == "FinalAnswerStep" else None, None)


def _plan_span(model):
    """The ``plan {name}`` span (a reason step) a model call belongs to, opened by the call
    that starts it: the agent's own model called while planning is due at the agent's
    current step (``planning_interval``, ``step_number``) and that step's planning step has
    not ended yet. smolagents offers no hook before a planning step, only the finished
    ``PlanningStep`` (a step callback, and an item of a streamed run), which ends the span
    with its usage and plan (``_end_plan``); a run that ends first ends it too."""
    run = _RUN.get()
    if run is None or run.ended or getattr(run.agent, "model", None) is not model:
        return None
    if run.plan is not None:
        return run.plan
    agent = run.agent
    interval, n = getattr(agent, "planning_interval", None), getattr(agent, "step_number", None)
    if not isinstance(interval, int) or not isinstance(n, int) or interval <= 0 or run.planned == n:
        return None
    if n != 1 and (n - 1) % interval:
        return None
    name = _agent_name(agent)
    run.plan = start_span(f"plan {name}", {semconv.GEN_AI_OPERATION_NAME: semconv.OP_PLAN,
                                           semconv.GEN_AI_AGENT_NAME: name, semconv.ASSAY_STEP_KIND: "reason",
                                           semconv.ASSAY_FRAMEWORK: FRAMEWORK}, parent=run.span)
    return run.plan


def _end_plan(run, step=None, exc=None) -> None:
    """End the open plan span: failed by ``exc``, else with what the ``PlanningStep`` says."""
    span, run.plan = run.plan, None
    if span is None:
        return
    run.planned = getattr(run.agent, "step_number", None)
    if exc is not None:
        fail(span, exc)
        return
    if step is not None:
        usage = getattr(step, "token_usage", None)
        if usage is not None:
            span.set_attributes({semconv.GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens,
                                 semconv.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens})
        if _runtime.capture_content() and getattr(step, "plan", None):
            span.set_attribute(semconv.GEN_AI_OUTPUT_MESSAGES, to_json([text_parts("assistant", step.plan)]))
    span.end()


def _on_planning_step(step, agent=None) -> None:
    """A PlanningStep is finalised (smolagents' step callback): its plan span ends."""
    run = _RUN.get()
    if run is not None and run.agent is agent and isinstance(step, _PLANNING_STEP):
        _end_plan(run, step)


def _tool_span(name, arguments, call_id, description=None, parent=None, start_time=None):
    respond = name == "final_answer"
    attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: name,
             semconv.GEN_AI_TOOL_CALL_ID: call_id, semconv.GEN_AI_TOOL_TYPE: "function",
             semconv.GEN_AI_TOOL_DESCRIPTION: description,
             semconv.ASSAY_STEP_KIND: "respond" if respond else "tool", semconv.ASSAY_FRAMEWORK: FRAMEWORK}
    if _runtime.capture_content() and arguments is not None:
        attrs[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = args_json(arguments)
    return start_span(f"execute_tool {name}", attrs, parent=parent, start_time=start_time)


def _finish_tool(span, out=None, exc=None):
    if exc is not None:
        cause = exc.__cause__ or exc
        fail(span, cause, message=str(exc))
        return
    if _runtime.capture_content():
        span.set_attribute(semconv.GEN_AI_TOOL_CALL_RESULT, result_text(out if isinstance(out, (str, dict, list, int, float)) else str(out)))
    span.end()


def _process_tool_calls(wrapped, instance, args, kwargs):
    # remember the model's call ids so execute_tool_call (which gets only name + arguments) can use them
    chat_message = args[0] if args else kwargs.get("chat_message")
    pending = instance.__dict__.setdefault("_otel_assay_ids", {})
    for c in getattr(chat_message, "tool_calls", None) or []:
        f = c.function
        pending.setdefault((f.name, args_json(f.arguments)), []).append(c.id)
    return wrapped(*args, **kwargs)


def _run_in_tool_span(span, wrapped, args, kwargs):
    """Run a tool inside its span. Inside it, the ``Tool.__call__`` or
    ``MultiStepAgent.__call__`` through which the agent's ``execute_tool_call`` runs the tool
    records no second span (``_IN_TOOL``, consumed by that call: see ``_direct_call``)."""
    token = _attached(span)
    flag = _IN_TOOL.set(True)
    try:
        try:
            out = wrapped(*args, **kwargs)
        finally:
            _IN_TOOL.reset(flag)
            otel_context.detach(token)
    except BaseException as e:
        _finish_tool(span, exc=e)
        run = _RUN.get()
        if run is not None:
            run.tool_failed = True  # the step's error is this one: see _on_action_step
        raise
    _finish_tool(span, out)
    return out


def _execute_tool_call(wrapped, instance, args, kwargs):
    name = args[0] if args else kwargs.get("tool_name")
    arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
    ids = instance.__dict__.get("_otel_assay_ids", {}).get((name, args_json(arguments)))
    call_id = ids.pop(0) if ids else None
    tool = {**getattr(instance, "tools", {}), **getattr(instance, "managed_agents", {})}.get(name)
    span = _tool_span(name, arguments, call_id, getattr(tool, "description", None))
    return _run_in_tool_span(span, wrapped, args, kwargs)


def _direct_call(wrapped, args, kwargs):
    """The call execute_tool_call makes, already recorded there. The mark is cleared while it
    runs: the tools it calls in turn (a managed CodeAgent's code calling its tools) are steps
    of their own."""
    flag = _IN_TOOL.set(False)
    try:
        return wrapped(*args, **kwargs)
    finally:
        _IN_TOOL.reset(flag)


def _tool_call(wrapped, instance, args, kwargs):
    if _IN_TOOL.get():
        return _direct_call(wrapped, args, kwargs)
    arguments = dict(kwargs)
    arguments.pop("sanitize_inputs_outputs", None)
    if args:
        if len(args) == 1 and isinstance(args[0], dict) and not arguments:
            arguments = args[0]
        else:  # positional call from generated code: name the arguments after the tool's inputs
            names = list(getattr(instance, "inputs", None) or {})
            named = dict(zip(names, args)) if len(names) >= len(args) else {"args": list(args)}
            arguments = {**named, **arguments}
    span = _tool_span(getattr(instance, "name", type(instance).__name__), arguments, None,
                      getattr(instance, "description", None))
    return _run_in_tool_span(span, wrapped, args, kwargs)


def _agent_call(wrapped, instance, args, kwargs):
    """A managed agent called as ``agent(task=...)``: from execute_tool_call (recorded there),
    or from a CodeAgent's code, where this records the delegating tool call."""
    if _IN_TOOL.get():
        return _direct_call(wrapped, args, kwargs)
    arguments = {"task": args[0], **kwargs} if args else dict(kwargs)
    span = _tool_span(_agent_name(instance), arguments, None, getattr(instance, "description", None))
    return _run_in_tool_span(span, wrapped, args, kwargs)


def _patch(owner, attr, wrapper) -> None:
    import wrapt
    orig = owner.__dict__[attr]
    setattr(owner, attr, wrapt.FunctionWrapper(orig, wrapper))
    _PATCHES.append((owner, attr, orig))


def instrument(module=None) -> bool:
    global _ACTION_STEP, _PLANNING_STEP, _EXECUTION_ERROR, _MAX_STEPS_ERROR
    if _PATCHES:
        return True
    from smolagents import agents, tools
    from smolagents.memory import ActionStep, PlanningStep
    from smolagents.utils import AgentExecutionError, AgentMaxStepsError
    _ACTION_STEP, _PLANNING_STEP = ActionStep, PlanningStep
    _EXECUTION_ERROR, _MAX_STEPS_ERROR = AgentExecutionError, AgentMaxStepsError
    _patch(agents.MultiStepAgent, "run", _run)
    _runtime.add_trial_end(_trial_end)
    _patch(agents.MultiStepAgent, "__call__", _agent_call)
    _patch(agents.ToolCallingAgent, "process_tool_calls", _process_tool_calls)
    _patch(agents.ToolCallingAgent, "execute_tool_call", _execute_tool_call)
    _patch(tools.Tool, "__call__", _tool_call)
    _wrap_models()
    return True


def uninstrument() -> None:
    while _PATCHES:
        owner, attr, orig = _PATCHES.pop()
        setattr(owner, attr, orig)
    _WRAPPED_MODELS.clear()
