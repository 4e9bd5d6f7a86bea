"""Streams whose reader breaks out at the first item not the task's, under OTEL_ASSAY_SCENARIO (implicit
trials): argv[1] team | agent | streaming-agent (its model client streams too, and the break
abandons that stream as well); argv[2] shutdown (asyncio.run ends right after the
break: the loop's close of the abandoned generator is cancelled, CancelledError) or aclose
(the reader closes it: GeneratorExit)."""

import otel_assay.auto  # noqa: F401

import asyncio  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.conditions import MaxMessageTermination  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat  # noqa: E402
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402
from autogen_scripted import INFO, text  # noqa: E402

warnings.filterwarnings("ignore")


def client():
    return ReplayChatCompletionClient([text("one two three"), text("two"), text("three")], model_info=INFO)


async def main(kind, how):
    if kind == "team":
        stream = RoundRobinGroupChat([AssistantAgent("chatty", model_client=client())],
                                     termination_condition=MaxMessageTermination(4)).run_stream(task="count")
    elif kind == "agent":
        stream = AssistantAgent("solo", model_client=client()).run_stream(task="count")
    else:
        stream = AssistantAgent("solo", model_client=client(), model_client_stream=True).run_stream(task="count")
    async for item in stream:
        if getattr(item, "source", None) != "user":
            break  # the first item of the model's (a chunk of its answer, when it streams) is enough
    if how == "aclose":
        await stream.aclose()


asyncio.run(main(sys.argv[1], sys.argv[2]))
