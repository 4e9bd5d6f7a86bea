"""Real OpenAI Agents SDK Runner + OpenAIChatCompletionsModel against the loopback
scripted OpenAI server, inside otel_assay trials."""

import otel_assay.auto  # noqa: F401

import asyncio  # noqa: E402

from agents import (Agent, GuardrailFunctionOutput, OpenAIChatCompletionsModel, OpenAIResponsesModel,  # noqa: E402
                    Runner, function_tool, input_guardrail, set_trace_processors, trace)
from openai import AsyncOpenAI  # noqa: E402

import otel_assay  # noqa: E402
from examples._fake_openai import FakeOpenAI, text_turn, tool_call_turn  # noqa: E402

# what applications do to stop the SDK uploading traces to OpenAI: replace its processors
set_trace_processors([])

fake = FakeOpenAI(model="fake-model-1")
client = AsyncOpenAI(api_key="x", base_url=fake.base_url, max_retries=0)


def model(name="fake-model-1"):
    return OpenAIChatCompletionsModel(model=name, openai_client=client)


@function_tool
def add(a: int, b: int) -> int:
    """Add two ints."""
    return a + b


@function_tool
def refund(order_id: str) -> str:
    """Refund an order."""
    raise RuntimeError(f"refund service down for {order_id}")


@otel_assay.step(kind="tool")
def orders_db(order_id: str) -> str:
    return f"order {order_id}: paid"


@function_tool
def lookup_order(order_id: str) -> str:
    """Look an order up."""
    return orders_db(order_id)


@function_tool
async def slow_refund(order_id: str) -> str:
    """Refund an order (slowly)."""
    await asyncio.sleep(30)
    return "refunded"


@input_guardrail
async def no_swearing(ctx, agent, inp):
    return GuardrailFunctionOutput(output_info="clean", tripwire_triggered=False)


async def main():
    # 1. multi-step tool use
    fake.script([tool_call_turn("add", {"a": 2, "b": 3}, "call_1"), tool_call_turn("add", {"a": 5, "b": 10}, "call_2", 30, 9),
                 text_turn("The answer is 15")])
    calc = Agent(name="calc", instructions="add numbers", tools=[add], model=model(), input_guardrails=[no_swearing])
    with otel_assay.trial("multi-step", version="v1") as t:
        r = await Runner.run(calc, "what is 2+3+10?")
        t.outcome(passed="15" in r.final_output)

    # 2. a tool error (the SDK reports it to the model, which answers)
    fake.script([tool_call_turn("refund", {"order_id": "A1"}, "c1"), text_turn("sorry")])
    sup = Agent(name="support", instructions="refunds", tools=[refund], model=model())
    with otel_assay.trial("tool-error", version="v1") as t:
        r = await Runner.run(sup, "refund A1")
        t.outcome(passed=r.final_output == "sorry")

    # 3. a handoff from a triage agent to a specialist
    fake.script([tool_call_turn("transfer_to_calc", {}, "h1", 15, 4), tool_call_turn("add", {"a": 20, "b": 22}, "k1"),
                 text_turn("42")])
    calc2 = Agent(name="calc", instructions="add numbers", tools=[add], model=model())
    triage = Agent(name="triage", instructions="route", handoffs=[calc2], model=model())
    with otel_assay.trial("handoff", version="v1") as t:
        r = await Runner.run(triage, "what is 20+22?")
        t.outcome(passed=r.final_output == "42")

    # 4. a tool whose code records a step of its own
    fake.script([tool_call_turn("lookup_order", {"order_id": "B2"}, "l1"), text_turn("B2 is paid")])
    sup = Agent(name="support", instructions="orders", tools=[lookup_order], model=model())
    with otel_assay.trial("step-in-tool", version="v1") as t:
        r = await Runner.run(sup, "is B2 paid?")
        t.outcome(passed=r.final_output == "B2 is paid")

    # 5. streamed runs and the Responses API model (the SDK's default model class), whose
    # spans record the model's answer as a Response object rather than chat messages
    for scenario, cls, streamed in (("streamed", OpenAIChatCompletionsModel, True),
                                    ("responses", OpenAIResponsesModel, False),
                                    ("responses-streamed", OpenAIResponsesModel, True)):
        fake.script([tool_call_turn("add", {"a": 2, "b": 3}, "call_1"), text_turn("5")])
        agent = Agent(name="calc", instructions="add numbers", tools=[add],
                      model=cls(model="fake-model-1", openai_client=client))
        with otel_assay.trial(scenario, version="v1") as t:
            if streamed:
                r = Runner.run_streamed(agent, "what is 2+3?")
                async for _ in r.stream_events():
                    pass
            else:
                r = await Runner.run(agent, "what is 2+3?")
            t.outcome(passed=r.final_output == "5")

    # 6. the run times out while a tool runs: the tool is cancelled
    fake.script([tool_call_turn("slow_refund", {"order_id": "A1"}, "z1"), text_turn("done")])
    sup = Agent(name="support", instructions="refunds", tools=[slow_refund], model=model())
    try:
        with otel_assay.trial("tool-timeout", version="v1"):
            await asyncio.wait_for(Runner.run(sup, "refund A1"), 0.5)
    except TimeoutError:
        pass
    else:
        raise SystemExit("the run did not time out")

    # 7. trials run inside an SDK trace opened around them (how the SDK groups several runs)
    calc3 = Agent(name="calc", instructions="add numbers", tools=[add], model=model())
    with trace("Eval run"):
        for i in range(2):
            fake.script([tool_call_turn("add", {"a": i, "b": 1}, "e1"), text_turn(str(i + 1))])
            with otel_assay.trial("in-sdk-trace", version="v1") as t:
                r = await Runner.run(calc3, "what is i+1?")
                t.outcome(passed=r.final_output == str(i + 1))


asyncio.run(main())
fake.close()
assert otel_assay.flush()
print("done")
