"""A CrewAI customer-support crew, instrumented with one import, run offline.

    python examples/crewai_agent.py --version v1 --trials 20 --dir LAKE
    python examples/crewai_agent.py --version v2 --trials 20 --dir LAKE
    otel-assay gate LAKE --baseline version=v1 --candidate version=v2

(CrewAI needs ``openai<3``: run it in its own environment, see docs/testing.md.)

The model is scripted (``ScriptedSupportLLM``, a real CrewAI ``BaseLLM`` speaking the ReAct
text protocol, so CrewAI's own tool-usage path runs) so the example runs anywhere; its
behaviour depends on the version (see _common.py). To use a real model, replace one line
in ``build_crew``:

    llm = LLM(model="openai/gpt-4o-mini")                   # from crewai import LLM
"""

from __future__ import annotations

import os

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

import otel_assay.auto  # noqa: E402,F401  -- the one import: every CrewAI step becomes a span

import json  # noqa: E402
from typing import Any  # noqa: E402

from crewai import Agent, Crew, Process, Task  # noqa: E402
from crewai.events.types.llm_events import LLMCallType  # noqa: E402
from crewai.llms.base_llm import BaseLLM, llm_call_context  # noqa: E402
from crewai.tools import tool  # noqa: E402

import otel_assay  # noqa: E402

try:
    from . import _common as C
except ImportError:  # run as a script
    import _common as C


class ScriptedSupportLLM(BaseLLM):
    """Replays the scripted turns of one trial as ReAct text (``Action`` / ``Final Answer``).
    CrewAI retries a tool that raised by itself, so the script needs no retry turn."""

    def __init__(self, script: C.Script, model: str = "scripted-support-1", **kw):
        super().__init__(model=model, **kw)
        self._script = script

    def call(self, messages, tools=None, callbacks=None, available_functions=None, from_task=None,
             from_agent=None, response_model=None, **kw):
        with llm_call_context():
            self._emit_call_started_event(messages=messages, tools=tools, callbacks=callbacks,
                                          available_functions=available_functions, from_task=from_task,
                                          from_agent=from_agent)
            t = self._script.next()
            if "tool" in t:
                reply = f"Thought: I should use {t['tool']}\nAction: {t['tool']}\nAction Input: {json.dumps(t['args'])}"
            else:
                reply = f"Thought: I now know the final answer\nFinal Answer: {t['text']}"
            self._emit_call_completed_event(response=reply, call_type=LLMCallType.LLM_CALL, from_task=from_task,
                                            from_agent=from_agent, messages=messages, finish_reason="stop",
                                            usage={"prompt_tokens": t["in"], "completion_tokens": t["out"],
                                                   "total_tokens": t["in"] + t["out"]})
            return reply

    def supports_function_calling(self) -> bool:
        return False

    def supports_stop_words(self) -> bool:
        return True

    def get_context_window_size(self) -> int:
        return 8192


def build_crew(turns, question: str) -> Crew:
    llm = ScriptedSupportLLM(C.Script(turns))  # real model: llm = LLM(model="openai/gpt-4o-mini")
    tools = [tool(f.__name__)(f) for f in C.agent_tools()]
    agent = Agent(role="support agent", goal="answer order questions correctly", backstory="customer support",
                  tools=tools, llm=llm, allow_delegation=False, max_iter=10, verbose=False)
    task = Task(description=question, expected_output="a short answer for the customer", agent=agent)
    return Crew(agents=[agent], tasks=[task], process=Process.sequential, name="support_crew", verbose=False)


def run_trials(version: str, n_trials: int, lake_dir: str | None = None, seed: int = 0) -> dict:
    """Run ``n_trials`` trials of each scenario for ``version``; spans go to ``lake_dir``
    (default OTEL_ASSAY_DIR or ./traces). Returns pass counts per scenario."""
    if lake_dir:
        otel_assay.capture.use_lake(lake_dir)
    result: dict[str, Any] = {"framework": "crewai", "version": version, "trials": n_trials, "passed": {}}
    for scenario in C.SCENARIOS:
        ok = 0
        for i in range(n_trials):
            rng = C.trial_rng(seed, version, scenario, i)
            order_id = C.make_order_id(rng)
            crew = build_crew(C.plan(scenario, version, rng, order_id), C.prompt(scenario, order_id))
            with otel_assay.trial(scenario, version=version, index=i) as t:
                out = crew.kickoff()
                good = C.passed(scenario, order_id, out.raw)
                t.outcome(passed=good)
            ok += good
        result["passed"][scenario] = ok
    otel_assay.flush()
    result["lake"] = otel_assay.capture.stats().get("target")
    return result


if __name__ == "__main__":
    C.main(run_trials, "crewai")
