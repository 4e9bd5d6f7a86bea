"""Real smolagents agents (ToolCallingAgent, CodeAgent, a managed agent, planning) with a
scripted offline Model, inside otel_assay trials."""

import otel_assay.auto  # noqa: F401

from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
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
    """Turns: ("call", name, args) | ("text", content) | ("plan", text); usage (in, out) per turn."""

    def __init__(self, turns, model_id="scripted-1"):
        super().__init__(model_id=model_id)
        self.turns, self.i = list(turns), 0

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
        kind, *rest = self.turns[min(self.i, len(self.turns) - 1)]
        self.i += 1
        usage = TokenUsage(input_tokens=10 * self.i + 1, output_tokens=self.i + 4)
        if kind == "call":
            name, args = rest
            return ChatMessage(role=MessageRole.ASSISTANT, content=None, token_usage=usage, tool_calls=[
                ChatMessageToolCall(id=f"{self.model_id}_call_{self.i}", type="function",
                                    function=ChatMessageToolCallFunction(name=name, arguments=args))])
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

# 5. planning: the plan is a reason step, its LLM call a child
agent = ToolCallingAgent(tools=[add], planning_interval=5, verbosity_level=0, name="planner",
                         model=ScriptedModel([("text", "1. add 1 and 1\n2. answer\n<end_plan>"),
                                              ("call", "add", {"a": 1, "b": 1}),
                                              ("call", "final_answer", {"answer": "2"})]))
with otel_assay.trial("planning", version="v1") as t:
    t.outcome(passed=agent.run("1+1?") == "2")

assert otel_assay.flush()
print("done")
