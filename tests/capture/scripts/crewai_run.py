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
from crewai.tools import tool  # noqa: E402

if ORDER == "auto-last":
    import otel_assay.auto  # noqa: F401,E402
import otel_assay  # noqa: E402
from crewai_run_llm import ScriptedLLM, act, final  # noqa: E402


@tool("add")
def add(a: int, b: int) -> int:
    """Add two ints."""
    return a + b


@tool("refund")
def refund(order_id: str) -> str:
    """Refund an order."""
    raise RuntimeError(f"refund service down for {order_id}")


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

# 4. native function calling through CrewAI's real OpenAI provider (a scripted server on
#    loopback): the model's tool calls are tool_call parts of its output, and tools that ran
#    but did not succeed (a ToolFailure returned, an unknown tool) are failed steps
from crewai import LLM  # noqa: E402
from crewai.tools.tool_failure import ToolFailure  # noqa: E402

from examples._fake_openai import FakeOpenAI, text_turn, tool_call_turn  # noqa: E402


@tool("post")
def post(channel: str) -> str:
    """Post to a channel."""
    return ToolFailure(message="channel_not_found", code="channel_not_found")


fake = FakeOpenAI([tool_call_turn("add", {"a": 2, "b": 3}, "call_1"), tool_call_turn("post", {"channel": "x"}, "call_2"),
                   tool_call_turn("nosuch", {"q": 1}, "call_3"), text_turn("5")], model="gpt-4o-mini")
poster = Agent(role="poster", goal="post", backstory="b", tools=[add, post], allow_delegation=False,
               llm=LLM(model="openai/gpt-4o-mini", base_url=fake.base_url, api_key="x"))
c = crew([poster], [Task(description="add 2 and 3, then post it", expected_output="a number", agent=poster)],
         "native_crew")
with otel_assay.trial("native-tools", version="v1") as t:
    t.outcome(passed=c.kickoff().raw == "5")

# 5. an agent kicked off on its own, without a crew (Agent.kickoff)
solo = Agent(role="solo", goal="add numbers", backstory="math", tools=[add], allow_delegation=False,
             llm=ScriptedLLM([act("add", {"a": 1, "b": 2}), final("3")]))
with otel_assay.trial("agent-kickoff", version="v1") as t:
    t.outcome(passed="3" in str(solo.kickoff("what is 1+2?")))

# 6. a process that never calls flush() (a service) does not keep every event it has seen:
#    ended ones are forgotten a while after their end (here 0.2 s instead of a minute)
import time  # noqa: E402

from crewai.events import crewai_event_bus  # noqa: E402

from otel_assay.capture import crewai as adapter  # noqa: E402

adapter._KEEP_ENDED_S = 0.2
echo = Agent(role="echo", goal="echo", backstory="b", allow_delegation=False, llm=ScriptedLLM([final("ok")]))
c = crew([echo], [Task(description="say ok", expected_output="ok", agent=echo)], "echo_crew")
held = []
for i in range(2):
    with otel_assay.trial("long-running", version="v1", index=i) as t:
        t.outcome(passed=c.kickoff().raw == "ok")
    crewai_event_bus.flush()
    held.append(len(adapter._LISTENER._nodes))
    time.sleep(0.5)
print("HELD", held)
adapter._KEEP_ENDED_S = 60.0

# 7. otel_assay.flush() while a crew runs (another thread; a service flushing periodically):
#    the events still to come find their parents, and nothing waits forever afterwards
import threading  # noqa: E402


@tool("slow_add")
def slow_add(a: int, b: int) -> int:
    """Add two ints, slowly."""
    time.sleep(1.5)
    return a + b


slow = Agent(role="slow", goal="add", backstory="b", tools=[slow_add], allow_delegation=False,
             llm=ScriptedLLM([act("slow_add", {"a": 1, "b": 1}), final("2")]))
c = crew([slow], [Task(description="add 1 and 1", expected_output="2", agent=slow)], "slow_crew")


def run_slow():
    with otel_assay.trial("flush-while-running", version="v1") as t:
        t.outcome(passed=c.kickoff().raw == "2")


th = threading.Thread(target=run_slow)
th.start()
time.sleep(0.7)  # inside the tool call
otel_assay.flush()
th.join()
assert otel_assay.flush()
print("LEFT", len(adapter._LISTENER._nodes), len(adapter._LISTENER._waiting_start), len(adapter._LISTENER._waiting_end))

assert otel_assay.flush()
print("done")
