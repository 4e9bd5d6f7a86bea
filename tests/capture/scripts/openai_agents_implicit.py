"""Agents SDK runs without otel_assay.trial, under OTEL_ASSAY_SCENARIO: each run is an
implicit trial that passes when the run completes and fails when it raises."""

import otel_assay.auto  # noqa: F401

import asyncio  # noqa: E402

from agents import (Agent, GuardrailFunctionOutput, InputGuardrailTripwireTriggered, MaxTurnsExceeded,  # noqa: E402
                    OpenAIChatCompletionsModel, Runner, function_tool, input_guardrail)
from openai import AsyncOpenAI  # noqa: E402

import otel_assay  # noqa: E402
from examples._fake_openai import FakeOpenAI, text_turn, tool_call_turn  # noqa: E402

fake = FakeOpenAI(model="fake-model-1")
client = AsyncOpenAI(api_key="x", base_url=fake.base_url, max_retries=0)


def model():
    return OpenAIChatCompletionsModel(model="fake-model-1", openai_client=client)


@function_tool
def add(a: int, b: int) -> int:
    """Add two ints."""
    return a + b


@input_guardrail
async def blocked(ctx, agent, inp):
    return GuardrailFunctionOutput(output_info="off topic", tripwire_triggered=True)


calc = Agent(name="calc", instructions="add numbers", tools=[add], model=model())


async def main():
    fake.script([tool_call_turn("add", {"a": 2, "b": 3}, "call_1"), text_turn("5")])
    assert (await Runner.run(calc, "what is 2+3?")).final_output == "5"
    fake.script([tool_call_turn("add", {"a": 1, "b": 1}, "call_1")])  # asks for tools forever
    try:
        await Runner.run(calc, "loop", max_turns=1)
    except MaxTurnsExceeded:
        pass
    else:
        raise SystemExit("max turns not exceeded")
    fake.script([text_turn("never")])
    try:
        await Runner.run(Agent(name="guarded", instructions="x", model=model(), input_guardrails=[blocked]), "hi")
    except InputGuardrailTripwireTriggered:
        pass
    else:
        raise SystemExit("tripwire not triggered")
    try:
        raise KeyError("handled by the caller")
    except KeyError:  # a run started while the caller handles an exception is not failed by it
        fake.script([text_turn("fine")])
        assert (await Runner.run(Agent(name="plain", instructions="x", model=model()), "hi")).final_output == "fine"
    # a streamed run past its max turns ends its trace cleanly and raises to the reader only
    fake.script([tool_call_turn("add", {"a": 1, "b": 1}, "call_1")])
    try:
        r = Runner.run_streamed(calc, "loop", max_turns=1)
        async for _ in r.stream_events():
            pass
    except MaxTurnsExceeded:
        pass
    else:
        raise SystemExit("max turns not exceeded (streamed)")
    # a streamed run the caller stops (RunResultStreaming.cancel()) is no failure of the run
    fake.script([tool_call_turn("add", {"a": 1, "b": 1}, "call_1"), text_turn("2")])
    r = Runner.run_streamed(calc, "1+1")
    async for _ in r.stream_events():
        r.cancel()


asyncio.run(main())
fake.script([tool_call_turn("add", {"a": 1, "b": 1}, "call_1")])
try:
    Runner.run_sync(calc, "loop", max_turns=1)
except MaxTurnsExceeded:
    pass
else:
    raise SystemExit("max turns not exceeded")


async def stop_reading():
    # the caller breaks out of the stream without cancel(): the run goes on unread until
    # asyncio.run, returning, cancels it
    fake.script([tool_call_turn("add", {"a": 1, "b": 1}, "call_1"), text_turn("2")])
    r = Runner.run_streamed(calc, "1+1")
    async for _ in r.stream_events():
        break


asyncio.run(stop_reading())
fake.close()
# what the SDK's docs suggest with another model provider: nothing could be recorded after it, and
# otel-assay says so rather than writing empty trials silently
from agents import set_tracing_disabled  # noqa: E402

set_tracing_disabled(True)
assert otel_assay.flush()
print("done")
