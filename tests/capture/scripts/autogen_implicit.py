"""AutoGen agents run on their own (agent.run / agent.run_stream, no team), without
otel_assay.trial and before anything else of the process made a span: the first run keeps
its invoke_agent span; under OTEL_ASSAY_SCENARIO each run is an implicit trial."""

import otel_assay.auto  # noqa: F401

import asyncio  # noqa: E402
import warnings  # noqa: E402

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402
from autogen_scripted import INFO, add, call, text  # noqa: E402

warnings.filterwarnings("ignore")


def agent(name, turns):
    return AssistantAgent(name, model_client=ReplayChatCompletionClient(turns, model_info=INFO), tools=[add],
                          reflect_on_tool_use=True)


async def main():
    # 1. the process's first span is AutoGen's own invoke_agent
    res = await agent("first", [call("add", {"a": 2, "b": 3}, "f1"), text("5")]).run(task="2+3?")
    assert res.messages[-1].content == "5"
    # 2. streamed, as Console(agent.run_stream(...)) reads it: the steps stay under the agent
    last = None
    async for m in agent("streamer", [call("add", {"a": 1, "b": 1}, "s1"), text("2")]).run_stream(task="1+1?"):
        last = m
    assert last.messages[-1].content == "2"
    # 3. a run that raises (the model client has no answer left)
    try:
        await agent("broken", []).run(task="?")
    except ValueError:
        pass
    else:
        raise SystemExit("the run did not raise")


asyncio.run(main())
