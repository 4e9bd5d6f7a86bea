"""CrewAI crews kicked off without otel_assay.trial, under OTEL_ASSAY_SCENARIO (implicit
trials): one completes, one fails because its model's provider is down, and one runs inside
an explicit trial (no second trial)."""

import os

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
import otel_assay.auto  # noqa: F401,E402
from crewai import Agent, Crew, Process, Task  # noqa: E402
from crewai.tools import tool  # noqa: E402

import otel_assay  # noqa: E402
from crewai_run_llm import ScriptedLLM, act, final  # noqa: E402


@tool("add")
def add(a: int, b: int) -> int:
    """Add two ints."""
    return a + b


class DownLLM(ScriptedLLM):
    def call(self, *a, **kw):
        raise ConnectionError("model provider unreachable")


def crew(llm, name):
    calc = Agent(role="calculator", goal="add numbers", backstory="math", tools=[add], allow_delegation=False, llm=llm)
    return Crew(agents=[calc], tasks=[Task(description="what is 2+3?", expected_output="a number", agent=calc)],
                process=Process.sequential, name=name, verbose=False)


print("RESULT", crew(ScriptedLLM([act("add", {"a": 2, "b": 3}), final("5")]), "calc_crew").kickoff().raw)
try:
    crew(DownLLM([]), "down_crew").kickoff()
except Exception as e:  # noqa: BLE001
    print("RAISED", type(e).__name__)
with otel_assay.trial("explicit", version="v1") as t:
    t.outcome(passed=crew(ScriptedLLM([final("5")]), "inner_crew").kickoff().raw == "5")
assert otel_assay.flush()
print("done")
