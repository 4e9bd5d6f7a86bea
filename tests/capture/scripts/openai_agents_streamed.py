"""Agents SDK streamed runs whose outcome the SDK tells only the reader of their events,
as implicit trials; the SDK's tracing is disabled before otel-assay is imported."""

from agents import set_tracing_disabled

set_tracing_disabled(True)  # before the import: the first run says that nothing is recorded

import otel_assay.auto  # noqa: E402,F401

import asyncio  # noqa: E402

from agents import (Agent, GuardrailFunctionOutput, InputGuardrailTripwireTriggered, OpenAIChatCompletionsModel,  # noqa: E402
                    Runner, function_tool, input_guardrail)
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
    # slower than the model: its tripwire arrives after the run's turn has ended
    await asyncio.sleep(0.3)
    return GuardrailFunctionOutput(output_info="off topic", tripwire_triggered=True)


async def read(r):
    async for _ in r.stream_events():
        pass


async def main():
    fake.script([text_turn("unseen")])
    await Runner.run(Agent(name="plain", instructions="x", model=model()), "hi")  # tracing off: no trial
    set_tracing_disabled(False)
    # an input guardrail trips once the run's loop is over: the trace ends cleanly, and the
    # reader alone gets the error
    fake.script([text_turn("never")])
    r = Runner.run_streamed(Agent(name="guarded", instructions="x", model=model(), input_guardrails=[blocked]), "hi")
    try:
        await read(r)
    except InputGuardrailTripwireTriggered:
        pass
    else:
        raise SystemExit("tripwire not triggered (streamed)")
    # past max turns with a max-turns handler that answers: the run completes
    fake.script([tool_call_turn("add", {"a": 1, "b": 1}, "call_1")])
    calc = Agent(name="calc", instructions="add numbers", tools=[add], model=model())
    r = Runner.run_streamed(calc, "loop", max_turns=1, error_handlers={"max_turns": lambda _: "gave up"})
    await read(r)
    assert r.final_output == "gave up", r.final_output


asyncio.run(main())
fake.close()
assert otel_assay.flush()
print("done")
