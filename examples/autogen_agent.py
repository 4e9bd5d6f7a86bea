"""An AutoGen (agentchat 0.7) customer-support agent, instrumented with one import, run offline.

    python examples/autogen_agent.py --version v1 --trials 20 --dir LAKE
    python examples/autogen_agent.py --version v2 --trials 20 --dir LAKE
    otel-assay gate LAKE --baseline version=v1 --candidate version=v2

The model is scripted (``ScriptedSupportClient``, a real AutoGen ``ChatCompletionClient``:
a ``ReplayChatCompletionClient`` fed turn by turn) so the example runs anywhere; its
behaviour depends on the version (see _common.py). To use a real model, replace one line
in ``build_agent``:

    client = OpenAIChatCompletionClient(model="gpt-4o-mini")  # from autogen_ext.models.openai import ...
"""

from __future__ import annotations

import otel_assay.auto  # noqa: F401  -- the one import: every AutoGen step becomes a span

import asyncio
import json
import logging
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient

import otel_assay

try:
    from . import _common as C
except ImportError:  # run as a script
    import _common as C

logging.getLogger("autogen_ext.models.replay").setLevel(logging.ERROR)  # "tool_choice ... ignored in replay mode"

MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
              "structured_output": False}


class ScriptedSupportClient(ReplayChatCompletionClient):
    """Answers each ``create`` with the trial's next scripted turn (a function call or the
    final text); retries a tool call once if it raised."""

    def __init__(self, script: C.Script, model: str = "scripted-support-1"):
        super().__init__([], model_info=MODEL_INFO)
        self.script, self.model = script, model

    async def create(self, messages, *, tools=(), tool_choice="auto", json_output=None, extra_create_args=None,
                     cancellation_token=None) -> CreateResult:
        t = self.script.next()
        usage = RequestUsage(prompt_tokens=t["in"], completion_tokens=t["out"])
        if "tool" in t:
            return CreateResult(finish_reason="function_calls", cached=False, usage=usage,
                                content=[FunctionCall(id=t["id"], name=t["tool"], arguments=json.dumps(t["args"]))])
        return CreateResult(finish_reason="stop", cached=False, usage=usage, content=t["text"])


def build_agent(turns) -> AssistantAgent:
    script = C.Script(turns)
    client = ScriptedSupportClient(script)  # real model: client = OpenAIChatCompletionClient(model="gpt-4o-mini")
    return AssistantAgent("support_agent", model_client=client, tools=C.agent_tools(on_error=script.tool_failed),
                          max_tool_iterations=8, description="answers order questions and issues refunds")


async def _run_trials(version: str, n_trials: int, seed: int, result: dict) -> None:
    for scenario in C.SCENARIOS:
        ok = 0
        for i in range(n_trials):
            rng = C.trial_rng(seed, version, scenario, i)
            order_id = C.make_order_id(rng)
            with otel_assay.trial(scenario, version=version, index=i) as t:
                agent = build_agent(C.plan(scenario, version, rng, order_id))  # AutoGen traces create_agent too
                out = await agent.run(task=C.prompt(scenario, order_id))
                good = C.passed(scenario, order_id, str(out.messages[-1].content))
                t.outcome(passed=good)
            ok += good
        result["passed"][scenario] = ok


def run_trials(version: str, n_trials: int, lake_dir: str | None = None, seed: int = 0) -> dict:
    """Run ``n_trials`` trials of each scenario for ``version``; spans go to ``lake_dir``
    (default OTEL_ASSAY_DIR or ./traces). Returns pass counts per scenario."""
    if lake_dir:
        otel_assay.capture.use_lake(lake_dir)
    result: dict[str, Any] = {"framework": "autogen", "version": version, "trials": n_trials, "passed": {}}
    asyncio.run(_run_trials(version, n_trials, seed, result))
    otel_assay.flush()
    result["lake"] = otel_assay.capture.stats().get("target")
    return result


if __name__ == "__main__":
    C.main(run_trials, "autogen")
