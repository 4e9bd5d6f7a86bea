"""Real AutoGen agents whose model clients wrap other clients (offline, ReplayChatCompletionClient):
subclasses calling super(), autogen_ext's ChatCompletionCache around a client, concurrent calls."""

import otel_assay.auto  # noqa: F401

import asyncio  # noqa: E402
import json  # noqa: E402
import warnings  # noqa: E402

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_core import FunctionCall  # noqa: E402
from autogen_core.models import CreateResult, RequestUsage, UserMessage  # noqa: E402
from autogen_ext.models.cache import ChatCompletionCache  # noqa: E402
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402

import otel_assay  # noqa: E402

warnings.filterwarnings("ignore")
INFO = {"vision": False, "function_calling": True, "json_output": False, "family": "scripted-1",
        "structured_output": False}


def call(pt=11, ct=7):
    return CreateResult(finish_reason="function_calls", cached=False, usage=RequestUsage(prompt_tokens=pt, completion_tokens=ct),
                        content=[FunctionCall(id="call_1", name="add", arguments=json.dumps({"a": 2, "b": 3}))])


def text(t, pt=20, ct=5):
    return CreateResult(finish_reason="stop", cached=False, usage=RequestUsage(prompt_tokens=pt, completion_tokens=ct),
                        content=t)


def add(a: int, b: int) -> int:
    """Add two ints."""
    return a + b


class LoggingClient(ReplayChatCompletionClient):
    """The usual wrapper-by-subclass: does its own thing, then hands the call to the base class."""

    seen = 0

    async def create(self, messages, **kwargs):
        self.seen += 1
        return await super().create(messages, **kwargs)


class StreamLoggingClient(ReplayChatCompletionClient):
    seen = 0

    async def create_stream(self, messages, **kwargs):
        self.seen += 1
        async for chunk in super().create_stream(messages, **kwargs):
            yield chunk


class StreamViaCreateClient(ReplayChatCompletionClient):
    """A client without streaming of its own: create_stream answers with create."""

    async def create_stream(self, messages, **kwargs):
        yield await self.create(messages, **kwargs)


class PlainSubclass(ReplayChatCompletionClient):
    pass


class RetryingClient(ReplayChatCompletionClient):
    """Asks the model again when the answer is empty: two model calls for one step of the agent."""

    async def create(self, messages, **kwargs):
        result = await super().create(messages, **kwargs)
        if not result.content:
            result = await super().create(messages, **kwargs)
        return result


def agent(name, model_client, **kw):
    return AssistantAgent(name, model_client=model_client, tools=[add], max_tool_iterations=3, **kw)


async def run(scenario, a, task="what is 2+3?"):
    with otel_assay.trial(scenario, version="v1") as t:
        res = await a.run(task=task)
        t.outcome(passed=res.messages[-1].content == "5")


async def main():
    # composition first: no agent has used ReplayChatCompletionClient itself yet
    store_client = ChatCompletionCache(ReplayChatCompletionClient([call(), text("5")], model_info=INFO))
    await run("cache-miss", agent("cached", store_client))
    # same agent name, task and tools: every call is answered from the cache, the inner client has nothing left
    hits = ChatCompletionCache(ReplayChatCompletionClient([], model_info=INFO), store=store_client.store)
    await run("cache-hit", agent("cached", hits))

    logging_client = LoggingClient([call(), text("5")], model_info=INFO)
    await run("subclass-super", agent("calc", logging_client))
    assert logging_client.seen == 2, logging_client.seen

    stream_client = StreamLoggingClient([call(), text("5")], model_info=INFO)
    await run("subclass-super-stream", agent("calc", stream_client, model_client_stream=True))
    assert stream_client.seen == 2, stream_client.seen

    await run("stream-via-create", agent("calc", StreamViaCreateClient([call(), text("5")], model_info=INFO),
                                         model_client_stream=True))
    await run("subclass-plain", agent("calc", PlainSubclass([call(), text("5")], model_info=INFO)))
    await run("retry", agent("calc", RetryingClient([call(), text("", 3, 0), text("5")], model_info=INFO)))
    try:  # the base class raises (no scripted answer left): one failed model call
        await run("subclass-error", agent("calc", LoggingClient([], model_info=INFO)))
    except ValueError:
        pass
    else:
        raise AssertionError("the model call did not fail")

    # independent calls at the same time, on one task each: each is its own model call
    a = agent("a", LoggingClient([text("5", 1, 1)], model_info=INFO))
    b = agent("b", LoggingClient([text("5", 2, 2)], model_info=INFO))
    direct = LoggingClient([text("x", 3, 3), text("y", 4, 4)], model_info=INFO)
    with otel_assay.trial("concurrent", version="v1") as t:
        msgs = [UserMessage(content="hi", source="user")]
        ra, rb, x, y = await asyncio.gather(a.run(task="1"), b.run(task="2"), direct.create(msgs), direct.create(msgs))
        t.outcome(passed=(ra.messages[-1].content, rb.messages[-1].content, x.content, y.content) == ("5", "5", "x", "y"))

    # a stream the caller stops reading (aclose() after the first chunk): no failed call
    streamer = ReplayChatCompletionClient(["one two three four"], model_info=INFO)  # streamed word by word
    with otel_assay.trial("stream-stopped", version="v1") as t:
        chunks = streamer.create_stream([UserMessage(content="count", source="user")])
        first = await chunks.__anext__()
        await chunks.aclose()
        t.outcome(passed=isinstance(first, str))


asyncio.run(main())
assert otel_assay.flush()
print("done")
