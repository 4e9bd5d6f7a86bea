"""Real smolagents agents (ToolCallingAgent, CodeAgent, a managed agent, planning) with a
scripted offline Model, inside otel_assay trials; then models that call other models
(generate_stream built on generate, subclasses calling super(), wrappers around a model)."""

import otel_assay.auto  # noqa: F401

import json

from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.models import (ChatMessage, ChatMessageStreamDelta, ChatMessageToolCall, ChatMessageToolCallFunction,
                               ChatMessageToolCallStreamDelta, MessageRole, Model)
from smolagents.monitoring import TokenUsage

import otel_assay


@tool
def add(a: int, b: int) -> int:
    """Add two ints.

    Args:
        a: first
        b: second
    """
    return a + b


@tool
def refund(order_id: str) -> str:
    """Refund an order.

    Args:
        order_id: the order
    """
    raise RuntimeError(f"refund service down for {order_id}")


class ScriptedModel(Model):
    """Turns: ("call", name, args) | ("calls", [(name, args), ...]) | ("text", content) |
    ("raise", message); usage (in, out) per turn."""

    def __init__(self, turns, model_id="scripted-1"):
        super().__init__(model_id=model_id)
        self.turns, self.i = list(turns), 0

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
        return self.turn()

    def turn(self):
        kind, *rest = self.turns[min(self.i, len(self.turns) - 1)]
        self.i += 1
        usage = TokenUsage(input_tokens=10 * self.i + 1, output_tokens=self.i + 4)
        if kind == "raise":
            raise RuntimeError(rest[0])
        if kind in ("call", "calls"):
            calls = [rest] if kind == "call" else rest[0]
            return ChatMessage(role=MessageRole.ASSISTANT, content=None, token_usage=usage, tool_calls=[
                ChatMessageToolCall(id=f"{self.model_id}_call_{self.i}" + (f"_{k}" if k else ""), type="function",
                                    function=ChatMessageToolCallFunction(name=name, arguments=args))
                for k, (name, args) in enumerate(calls)])
        return ChatMessage(role=MessageRole.ASSISTANT, content=rest[0], token_usage=usage)


# 1. multi-step tool use, ToolCallingAgent
agent = ToolCallingAgent(tools=[add], model=ScriptedModel([("call", "add", {"a": 2, "b": 3}),
                                                           ("call", "add", {"a": 5, "b": 10}),
                                                           ("call", "final_answer", {"answer": "15"})]),
                         verbosity_level=0, name="calc")
with otel_assay.trial("multi-step", version="v1") as t:
    t.outcome(passed=str(agent.run("what is 2+3+10?")) == "15")

# 2. a tool error: the agent sees it and answers anyway
agent = ToolCallingAgent(tools=[refund], model=ScriptedModel([("call", "refund", {"order_id": "A1"}),
                                                              ("call", "final_answer", {"answer": "sorry"})]),
                         verbosity_level=0, name="support")
with otel_assay.trial("tool-error", version="v1") as t:
    t.outcome(passed=agent.run("refund A1") == "sorry")

# 3. CodeAgent: tools called from generated code; the final answer is the respond step
code = "Thought: add them\n<code>\nr = add(a=2, b=3)\nfinal_answer(r)\n</code>"
agent = CodeAgent(tools=[add], model=ScriptedModel([("text", code)], model_id="scripted-code"),
                  verbosity_level=0, name="coder")
with otel_assay.trial("code-agent", version="v1") as t:
    t.outcome(passed=agent.run("what is 2+3?") == 5)

# 4. multi-agent: a manager delegates to a managed agent
worker = ToolCallingAgent(tools=[add], model=ScriptedModel([("call", "add", {"a": 20, "b": 22}),
                                                            ("call", "final_answer", {"answer": "42"})],
                                                           model_id="scripted-worker"),
                          verbosity_level=0, name="worker", description="adds numbers")
manager = ToolCallingAgent(tools=[], managed_agents=[worker], verbosity_level=0, name="manager",
                           model=ScriptedModel([("call", "worker", {"task": "add 20 and 22"}),
                                                ("call", "final_answer", {"answer": "42"})], model_id="scripted-boss"))
with otel_assay.trial("multi-agent", version="v1") as t:
    t.outcome(passed=manager.run("what is 20+22?") == "42")

# 4b. managed agents across agent kinds: a CodeAgent's code delegating to a managed agent,
# and a ToolCallingAgent delegating to a managed CodeAgent (whose code calls its tools)
worker = ToolCallingAgent(tools=[add], model=ScriptedModel([("call", "add", {"a": 20, "b": 22}),
                                                            ("call", "final_answer", {"answer": "42"})],
                                                           model_id="scripted-worker"),
                          verbosity_level=0, name="worker", description="adds numbers")
manager = CodeAgent(tools=[], managed_agents=[worker], verbosity_level=0, name="manager",
                    model=ScriptedModel([("text", "<code>\nr = worker(task='add 20 and 22')\n"
                                                  "final_answer('42')\n</code>")], model_id="scripted-boss"))
with otel_assay.trial("code-manager", version="v1") as t:
    t.outcome(passed=manager.run("what is 20+22?") == "42")

coder = CodeAgent(tools=[add], verbosity_level=0, name="coder", description="adds numbers in code",
                  model=ScriptedModel([("text", "<code>\nfinal_answer(add(a=20, b=22))\n</code>")],
                                      model_id="scripted-worker"))
manager = ToolCallingAgent(tools=[], managed_agents=[coder], verbosity_level=0, name="manager",
                           model=ScriptedModel([("call", "coder", {"task": "add 20 and 22"}),
                                                ("call", "final_answer", {"answer": "42"})], model_id="scripted-boss"))
with otel_assay.trial("code-worker", version="v1") as t:
    t.outcome(passed=manager.run("what is 20+22?") == "42")

# 4c. a streamed run whose consumer stops early
agent = ToolCallingAgent(tools=[add], model=ScriptedModel([("call", "add", {"a": 2, "b": 3}),
                                                           ("call", "final_answer", {"answer": "5"})]),
                         verbosity_level=0, name="calc")
with otel_assay.trial("stream-break", version="v1") as t:
    for step in agent.run("what is 2+3?", stream=True):
        if type(step).__name__ == "ActionStep":
            break  # the first step is enough
    t.outcome(passed=step.tool_calls[0].name == "add")

# 4c'. the same, with the run's generator kept in a variable past the trial (closed only at
# interpreter exit, after the flush)
agent = ToolCallingAgent(tools=[add], model=ScriptedModel([("call", "add", {"a": 2, "b": 3}),
                                                           ("call", "final_answer", {"answer": "5"})]),
                         verbosity_level=0, name="calc")
with otel_assay.trial("stream-kept", version="v1") as t:
    kept_steps = agent.run("what is 2+3?", stream=True)
    for step in kept_steps:
        if type(step).__name__ == "ToolCall":
            break  # the model has answered; its step is not over
    t.outcome(passed=step.name == "add")

# 5. planning: the plan is a reason step, its LLM call a child
agent = ToolCallingAgent(tools=[add], planning_interval=5, verbosity_level=0, name="planner",
                         model=ScriptedModel([("text", "1. add 1 and 1\n2. answer\n<end_plan>"),
                                              ("call", "add", {"a": 1, "b": 1}),
                                              ("call", "final_answer", {"answer": "2"})]))
with otel_assay.trial("planning", version="v1") as t:
    t.outcome(passed=agent.run("1+1?") == "2")

# 5b. planning again at every step: each plan has its own span and only its own LLM call
agent = ToolCallingAgent(tools=[add], planning_interval=1, verbosity_level=0, name="replanner",
                         model=ScriptedModel([("text", "1. add 1 and 1\n<end_plan>"),
                                              ("call", "add", {"a": 1, "b": 1}),
                                              ("text", "1. answer 2\n<end_plan>"),
                                              ("call", "final_answer", {"answer": "2"})]))
with otel_assay.trial("replanning", version="v1") as t:
    t.outcome(passed=agent.run("1+1?") == "2")


# 6. steps that fail without the run failing: smolagents records the error on the ActionStep
# and lets the model try again
def coder(turns):
    return CodeAgent(tools=[add, refund], model=ScriptedModel(turns, model_id="scripted-code"), verbosity_level=0,
                     name="coder")


final_code = "<code>\nfinal_answer(5)\n</code>"
for scenario, agent in (
        # the code raises by itself: the code execution is the failed step
        ("code-error", coder([("text", "<code>\nx = 1 / 0\n</code>"), ("text", final_code)])),
        # the code calls a tool that raises: the tool call is the failed step, and the only one
        ("code-tool-error", coder([("text", "<code>\nrefund(order_id='A1')\n</code>"), ("text", final_code)])),
        # no code block in the answer: the model call is the failed step
        ("code-parse-error", coder([("text", "The answer is 5."), ("text", final_code)])),
        # no tool call in the answer (nor one written as JSON text): the model call is the failed step
        ("parse-error", ToolCallingAgent(tools=[add], verbosity_level=0, name="calc", model=ScriptedModel(
            [("text", "I think it is 5"), ("call", "final_answer", {"answer": "5"})])))):
    with otel_assay.trial(scenario, version="v1") as t:
        t.outcome(passed=str(agent.run("what is 2+3?")) == "5")

# 7. out of steps: the model answers once more (provide_final_answer) and run() returns that
# answer; the caller's check accepts it, the agent still did not finish its task
agent = ToolCallingAgent(tools=[add], max_steps=2, verbosity_level=0, name="calc", model=ScriptedModel(
    [("call", "add", {"a": 2, "b": 3}), ("call", "add", {"a": 2, "b": 3}), ("text", "5, I think")]))
with otel_assay.trial("max-steps", version="v1") as t:
    t.outcome(passed=agent.run("what is 2+3?") == "5, I think")

# ------------------------------------------------------------------ models calling models
def deltas(msg):
    """A whole answer as a stream: the text in two pieces, the tool calls, the usage split in two."""
    u = msg.token_usage
    text = msg.content or ""
    yield ChatMessageStreamDelta(content=text[:3], token_usage=TokenUsage(input_tokens=u.input_tokens, output_tokens=0))
    yield ChatMessageStreamDelta(content=text[3:], tool_calls=[
        ChatMessageToolCallStreamDelta(index=k, id=c.id, type="function", function=ChatMessageToolCallFunction(
            name=c.function.name, arguments=json.dumps(c.function.arguments)))
        for k, c in enumerate(msg.tool_calls or [])] or None,
        token_usage=TokenUsage(input_tokens=0, output_tokens=u.output_tokens))


class NativeStreamModel(ScriptedModel):
    """Streams its answers itself (no generate underneath)."""

    def generate_stream(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
        yield from deltas(self.turn())


class StreamViaGenerateModel(ScriptedModel):
    """No streaming of its own: generate_stream answers with self.generate, in one piece."""

    def generate_stream(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
        yield from deltas(self.generate(messages, stop_sequences=stop_sequences, tools_to_call_from=tools_to_call_from))


class LoggingModel(ScriptedModel):
    """The usual wrapper-by-subclass: does its own thing, then hands the call to the base class."""

    seen = 0

    def generate(self, messages, **kw):
        self.seen += 1
        return super().generate(messages, **kw)


class GuardModel(Model):
    """A model around another model (composition): checks the answer, the inner model answers."""

    def __init__(self, inner):
        super().__init__(model_id="guard")
        self.inner = inner

    def generate(self, messages, **kw):
        msg = self.inner.generate(messages, **kw)
        assert msg.content or msg.tool_calls
        return msg


class CachingModel(Model):
    """Answers a conversation it has seen before from its cache, without the inner model."""

    def __init__(self, inner, store):
        super().__init__(model_id="cache")
        self.inner, self.store = inner, store

    def generate(self, messages, **kw):
        key = repr([(str(m.role), m.content) for m in messages])
        if key not in self.store:
            self.store[key] = self.inner.generate(messages, **kw)
        return self.store[key]


ADD_THEN_ANSWER = [("call", "add", {"a": 2, "b": 3}), ("call", "final_answer", {"answer": "5"})]

# 5c. planning at every step with the model's answers streamed
agent = ToolCallingAgent(tools=[add], planning_interval=1, verbosity_level=0, name="replanner", stream_outputs=True,
                         model=NativeStreamModel([("text", "1. add 1 and 1\n<end_plan>"),
                                                  ("call", "add", {"a": 1, "b": 1}),
                                                  ("text", "1. answer 2\n<end_plan>"),
                                                  ("call", "final_answer", {"answer": "2"})]))
with otel_assay.trial("replanning-stream", version="v1") as t:
    t.outcome(passed=agent.run("1+1?") == "2")

# 4d. streamed runs whose consumer stops while the agent plans, and while the model streams
for scenario, kw in (("stream-break-plan", dict(planning_interval=1)), ("stream-break-deltas", dict(stream_outputs=True))):
    agent = ToolCallingAgent(tools=[add], model=NativeStreamModel([("text", "1. add\n<end_plan>")]),
                             verbosity_level=0, name="calc", **kw)
    with otel_assay.trial(scenario, version="v1") as t:
        run_steps = agent.run("what is 2+3?", stream=True)
        first = next(iter(run_steps))
        run_steps.close()  # what a break does once the generator is dropped
        t.outcome(passed=first is not None)



def calc(model, **kw):
    return ToolCallingAgent(tools=[add], model=model, verbosity_level=0, name="calc", **kw)


def run(scenario, agent, task="what is 2+3?", expect="5"):
    with otel_assay.trial(scenario, version="v1") as t:
        t.outcome(passed=str(agent.run(task)) == expect)


run("stream-native", calc(NativeStreamModel(ADD_THEN_ANSWER), stream_outputs=True))
run("stream-via-generate", calc(StreamViaGenerateModel(ADD_THEN_ANSWER), stream_outputs=True))
logging_model = LoggingModel(ADD_THEN_ANSWER)
run("subclass-super", calc(logging_model))
assert logging_model.seen == 2, logging_model.seen
run("wrapper", calc(GuardModel(ScriptedModel(ADD_THEN_ANSWER))))

# the inner model is an agent's model too: it answers that agent, then through the guard
shared = ScriptedModel(ADD_THEN_ANSWER + ADD_THEN_ANSWER)
with otel_assay.trial("wrapper-shared", version="v1") as t:
    t.outcome(passed=(calc(shared).run("what is 2+3?"), calc(GuardModel(shared)).run("what is 2+3?")) == ("5", "5"))

store = {}
run("cache-miss", calc(CachingModel(ScriptedModel(ADD_THEN_ANSWER), store)))
run("cache-hit", calc(CachingModel(ScriptedModel([("raise", "no model call expected")]), store)))

failing = LoggingModel([("raise", "model down")])
try:
    with otel_assay.trial("subclass-error", version="v1"):
        calc(failing).run("what is 2+3?")
except Exception as e:
    print("re-raised:", type(e).__name__)
else:
    raise SystemExit("the model call did not fail")

# the provider is unreachable or times out: smolagents raises AgentGenerationError from the
# model's error, and the trial is classified by that error
class DownModel(ScriptedModel):
    def generate(self, messages, **kw):
        raise self.turns[0]


for scenario, exc in (("model-unreachable", ConnectionRefusedError("connection refused")),
                      ("model-timeout", TimeoutError("read timed out"))):
    try:
        with otel_assay.trial(scenario, version="v1"):
            calc(DownModel([exc])).run("what is 2+3?")
    except Exception as e:
        print("re-raised:", type(e).__name__)
    else:
        raise SystemExit("the model call did not fail")

# two managed agents called in one step run in threads at the same time, each with its own model calls
workers = [ToolCallingAgent(tools=[add], verbosity_level=0, name=f"worker{k}", description="adds numbers",
                            model=ScriptedModel([("call", "add", {"a": k, "b": k}), ("call", "final_answer", {"answer": str(2 * k)})],
                                                model_id=f"scripted-w{k}"))
           for k in (1, 2)]
boss = ToolCallingAgent(tools=[], managed_agents=workers, verbosity_level=0, name="boss",
                        model=ScriptedModel([("calls", [("worker1", {"task": "1+1"}), ("worker2", {"task": "2+2"})]),
                                             ("call", "final_answer", {"answer": "2 and 4"})], model_id="scripted-boss"))
run("parallel-workers", boss, "1+1 and 2+2?", "2 and 4")

assert otel_assay.flush()
print("done")
