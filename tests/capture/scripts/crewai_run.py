"""Real CrewAI crews with a scripted BaseLLM (ReAct text protocol, real ToolUsage path),
inside otel_assay trials. Usage: crewai_run.py [auto-first|auto-last]"""

import os
import sys

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
ORDER = sys.argv[1] if len(sys.argv) > 1 else "auto-first"
if ORDER == "auto-first":
    import otel_assay.auto  # noqa: F401

from crewai import Agent, Crew, Process, Task  # noqa: E402
from crewai.events.types.llm_events import LLMCallType  # noqa: E402
from crewai.llms.base_llm import BaseLLM, llm_call_context  # noqa: E402
from crewai.tools import tool  # noqa: E402

if ORDER == "auto-last":
    import otel_assay.auto  # noqa: F401,E402
import otel_assay  # noqa: E402


@tool("add")
def add(a: int, b: int) -> int:
    """Add two ints."""
    return a + b


@tool("refund")
def refund(order_id: str) -> str:
    """Refund an order."""
    raise RuntimeError(f"refund service down for {order_id}")


class ScriptedLLM(BaseLLM):
    def __init__(self, replies, model="scripted-1", **kw):
        super().__init__(model=model, **kw)
        self._replies = list(replies)
        self._i = 0

    def call(self, messages, tools=None, callbacks=None, available_functions=None, from_task=None,
             from_agent=None, response_model=None, **kw):
        with llm_call_context():
            self._emit_call_started_event(messages=messages, tools=tools, callbacks=callbacks,
                                          available_functions=available_functions, from_task=from_task,
                                          from_agent=from_agent)
            r = self._replies[min(self._i, len(self._replies) - 1)]
            self._i += 1
            self._emit_call_completed_event(response=r, call_type=LLMCallType.LLM_CALL, from_task=from_task,
                                            from_agent=from_agent, messages=messages, finish_reason="stop",
                                            usage={"prompt_tokens": 10 * self._i + 1, "completion_tokens": self._i + 6,
                                                   "total_tokens": 11 * self._i + 7})
            return r

    def supports_function_calling(self):
        return False

    def supports_stop_words(self):
        return True

    def get_context_window_size(self):
        return 8192


def act(tool_name, args):
    import json
    return f"Thought: use {tool_name}\nAction: {tool_name}\nAction Input: {json.dumps(args)}"


def final(text):
    return f"Thought: I now know the final answer\nFinal Answer: {text}"


def crew(agents, tasks, name):
    return Crew(agents=agents, tasks=tasks, process=Process.sequential, name=name, verbose=False)


# 1. multi-step tool use
calc = Agent(role="calculator", goal="add numbers", backstory="math", tools=[add], allow_delegation=False,
             llm=ScriptedLLM([act("add", {"a": 2, "b": 3}), act("add", {"a": 5, "b": 10}), final("15")]))
c = crew([calc], [Task(description="what is 2+3+10?", expected_output="a number", agent=calc)], "calc_crew")
with otel_assay.trial("multi-step", version="v1") as t:
    t.outcome(passed=c.kickoff().raw == "15")

# 2. a tool error
sup = Agent(role="support", goal="refunds", backstory="support", tools=[refund], allow_delegation=False,
            llm=ScriptedLLM([act("refund", {"order_id": "A1"}), final("sorry")]))
c = crew([sup], [Task(description="refund A1", expected_output="text", agent=sup)], "support_crew")
with otel_assay.trial("tool-error", version="v1") as t:
    t.outcome(passed=c.kickoff().raw == "sorry")

# 3. delegation: a manager delegates to a researcher
researcher = Agent(role="researcher", goal="find facts", backstory="facts", tools=[add], allow_delegation=False,
                   llm=ScriptedLLM([act("add", {"a": 20, "b": 22}), final("42")], model="scripted-research"))
manager = Agent(role="manager", goal="answer", backstory="boss", allow_delegation=True,
                llm=ScriptedLLM([act("Delegate work to coworker", {"task": "add 20 and 22", "context": "math",
                                                                    "coworker": "researcher"}),
                                 final("42")], model="scripted-boss"))
c = crew([manager, researcher], [Task(description="what is 20+22?", expected_output="a number", agent=manager)],
         "delegating_crew")
with otel_assay.trial("delegation", version="v1") as t:
    t.outcome(passed=c.kickoff().raw == "42")

assert otel_assay.flush()
print("done")
