"""A smolagents customer-support agent, instrumented with one import, run offline.

    python examples/smolagents_agent.py --version v1 --trials 20 --dir LAKE
    python examples/smolagents_agent.py --version v2 --trials 20 --dir LAKE
    otel-assay gate LAKE --baseline version=v1 --candidate version=v2

The model is scripted (``ScriptedSupportModel``, a real smolagents ``Model``) so the
example runs anywhere; its behaviour depends on the version (see _common.py). To use a
real model, replace one line in ``build_agent``:

    model = OpenAIServerModel(model_id="gpt-4o-mini")      # from smolagents import OpenAIServerModel
"""

from __future__ import annotations

import otel_assay.auto  # noqa: F401  -- the one import: every smolagents step becomes a span

from typing import Any

from smolagents import ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import TokenUsage

import otel_assay

try:
    from . import _common as C
except ImportError:  # run as a script
    import _common as C


class ScriptedSupportModel(Model):
    """Replays the scripted turns of one trial (a tool call, or the final answer through
    smolagents' ``final_answer`` tool); retries a tool call once if it raised."""

    def __init__(self, script: C.Script, model_id: str = "scripted-support-1"):
        super().__init__(model_id=model_id)
        self.script = script

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
        t = self.script.next()
        usage = TokenUsage(input_tokens=t["in"], output_tokens=t["out"])
        if "tool" in t:
            name, args, call_id = t["tool"], t["args"], t["id"]
        else:  # smolagents agents answer through the final_answer tool
            name, args, call_id = "final_answer", {"answer": t["text"]}, "call_final"
        return ChatMessage(role=MessageRole.ASSISTANT, content=None, token_usage=usage, tool_calls=[
            ChatMessageToolCall(id=call_id, type="function",
                                function=ChatMessageToolCallFunction(name=name, arguments=args))])


def build_agent(turns) -> ToolCallingAgent:
    script = C.Script(turns)
    model = ScriptedSupportModel(script)  # real model: model = OpenAIServerModel(model_id="gpt-4o-mini")
    tools = [tool(f) for f in C.agent_tools(on_error=script.tool_failed)]
    return ToolCallingAgent(tools=tools, model=model, max_steps=8, verbosity_level=0, name="support_agent")


def run_trials(version: str, n_trials: int, lake_dir: str | None = None, seed: int = 0) -> dict:
    """Run ``n_trials`` trials of each scenario for ``version``; spans go to ``lake_dir``
    (default OTEL_ASSAY_DIR or ./traces). Returns pass counts per scenario."""
    if lake_dir:
        otel_assay.capture.use_lake(lake_dir)
    result: dict[str, Any] = {"framework": "smolagents", "version": version, "trials": n_trials, "passed": {}}
    for scenario in C.SCENARIOS:
        ok = 0
        for i in range(n_trials):
            rng = C.trial_rng(seed, version, scenario, i)
            order_id = C.make_order_id(rng)
            agent = build_agent(C.plan(scenario, version, rng, order_id))
            with otel_assay.trial(scenario, version=version, index=i) as t:
                out = agent.run(C.prompt(scenario, order_id))
                good = C.passed(scenario, order_id, str(out))
                t.outcome(passed=good)
            ok += good
        result["passed"][scenario] = ok
    otel_assay.flush()
    result["lake"] = otel_assay.capture.stats().get("target")
    return result


if __name__ == "__main__":
    C.main(run_trials, "smolagents")
