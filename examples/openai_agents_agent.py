"""An OpenAI Agents SDK customer-support agent, instrumented with one import, run offline.

    python examples/openai_agents_agent.py --version v1 --trials 20 --dir LAKE
    python examples/openai_agents_agent.py --version v2 --trials 20 --dir LAKE
    otel-assay gate LAKE --baseline version=v1 --candidate version=v2

The SDK's real ``OpenAIChatCompletionsModel`` talks to a scripted OpenAI-compatible server
on 127.0.0.1 (``_fake_openai.py``), so the example runs anywhere; the scripted behaviour
depends on the version (see _common.py). To use a real model, replace one line in
``build_agent``:

    model = "gpt-4o-mini"                                   # needs OPENAI_API_KEY
"""

from __future__ import annotations

import otel_assay.auto  # noqa: F401  -- the one import: every Agents SDK step becomes a span

import asyncio
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_trace_processors
from openai import AsyncOpenAI

import otel_assay

# an offline example: no upload of its traces to OpenAI (otel-assay's processor stays registered)
set_trace_processors([])

try:
    from . import _common as C
    from ._fake_openai import FakeOpenAI, text_turn, tool_call_turn
except ImportError:  # run as a script
    import _common as C
    from _fake_openai import FakeOpenAI, text_turn, tool_call_turn


class ScriptedSupportServer(FakeOpenAI):
    """Answers each chat-completions request with the current trial's next scripted turn;
    the Agents SDK reports a raised tool's error to the model, which retries it once."""

    script: C.Script | None = None
    client: AsyncOpenAI | None = None

    def next_turn(self, body: dict) -> dict:
        t = self.script.next()
        if "tool" in t:
            return tool_call_turn(t["tool"], t["args"], t["id"], t["in"], t["out"])
        return text_turn(t["text"], t["in"], t["out"])


_SERVER: ScriptedSupportServer | None = None


def server() -> ScriptedSupportServer:
    global _SERVER
    if _SERVER is None:
        _SERVER = ScriptedSupportServer(model="scripted-support-1")
    return _SERVER


def build_agent(turns) -> Agent:
    script = C.Script(turns)
    srv = server()
    srv.script = script
    # real model: model = "gpt-4o-mini"
    model = OpenAIChatCompletionsModel(model="scripted-support-1", openai_client=srv.client)
    tools = [function_tool(f) for f in C.agent_tools(on_error=script.tool_failed)]
    return Agent(name="support_agent", instructions="Answer order questions; look orders up before acting.",
                 tools=tools, model=model)


async def _run_trials(version: str, n_trials: int, seed: int, result: dict) -> None:
    srv = server()
    srv.client = AsyncOpenAI(api_key="offline", base_url=srv.base_url, max_retries=0)  # one per event loop
    for scenario in C.SCENARIOS:
        ok = 0
        for i in range(n_trials):
            rng = C.trial_rng(seed, version, scenario, i)
            order_id = C.make_order_id(rng)
            agent = build_agent(C.plan(scenario, version, rng, order_id))
            with otel_assay.trial(scenario, version=version, index=i) as t:
                out = await Runner.run(agent, C.prompt(scenario, order_id), max_turns=10)
                good = C.passed(scenario, order_id, str(out.final_output))
                t.outcome(passed=good)
            ok += good
        result["passed"][scenario] = ok


def run_trials(version: str, n_trials: int, lake_dir: str | None = None, seed: int = 0) -> dict:
    """Run ``n_trials`` trials of each scenario for ``version``; spans go to ``lake_dir``
    (default OTEL_ASSAY_DIR or ./traces). Returns pass counts per scenario."""
    if lake_dir:
        otel_assay.capture.use_lake(lake_dir)
    result: dict[str, Any] = {"framework": "openai-agents", "version": version, "trials": n_trials, "passed": {}}
    asyncio.run(_run_trials(version, n_trials, seed, result))
    otel_assay.flush()
    result["lake"] = otel_assay.capture.stats().get("target")
    return result


if __name__ == "__main__":
    C.main(run_trials, "openai-agents")
