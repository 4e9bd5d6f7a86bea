"""smolagents runs without otel_assay.trial, under OTEL_ASSAY_SCENARIO: each run is an implicit
trial. A run that reaches max_steps returns normally (with the answer the model writes once
out of steps) and must not pass."""

import otel_assay.auto  # noqa: F401

from smolagents import ToolCallingAgent, tool  # noqa: E402
from smolagents.models import (ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction,  # noqa: E402
                               MessageRole, Model)

import otel_assay  # noqa: E402


@tool
def add(a: int, b: int) -> int:
    """Add two ints.

    Args:
        a: first
        b: second
    """
    return a + b


class ScriptedModel(Model):
    """Turns: (tool name, arguments) for a tool call, or a str for a text answer."""

    def __init__(self, turns):
        super().__init__(model_id="scripted-1")
        self.turns, self.i = list(turns), 0

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
        turn = self.turns[min(self.i, len(self.turns) - 1)]
        self.i += 1
        if isinstance(turn, str):
            return ChatMessage(role=MessageRole.ASSISTANT, content=turn)
        return ChatMessage(role=MessageRole.ASSISTANT, content=None, tool_calls=[ChatMessageToolCall(
            id=f"call_{self.i}", type="function", function=ChatMessageToolCallFunction(name=turn[0], arguments=turn[1]))])


def calc(turns, **kw):
    return ToolCallingAgent(tools=[add], model=ScriptedModel(turns), verbosity_level=0, name="calc", **kw)


LOOP = [("add", {"a": 2, "b": 3}), ("add", {"a": 2, "b": 3}), "5, I think"]
assert calc([("final_answer", {"answer": "5"})]).run("what is 2+3?") == "5"
assert calc(LOOP, max_steps=2).run("what is 2+3?") == "5, I think"
steps = list(calc(LOOP, max_steps=2).run("what is 2+3?", stream=True))
assert steps[-1].output == "5, I think", steps[-1]
assert otel_assay.flush()
print("done")
