"""Real AutoGen agentchat agents and teams with ReplayChatCompletionClient (offline)."""

import sys

ORDER = sys.argv[1] if len(sys.argv) > 1 else "auto-first"
if ORDER == "auto-first":
    import otel_assay.auto  # noqa: F401

import asyncio  # noqa: E402
import warnings  # noqa: E402

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat  # noqa: E402
from autogen_agentchat.tools import AgentTool  # noqa: E402
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402
from autogen_scripted import INFO, add, call, text  # noqa: E402

if ORDER == "auto-last":
    import otel_assay.auto  # noqa: F401,E402

import otel_assay  # noqa: E402

warnings.filterwarnings("ignore")
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: paid"


def refund(order_id: str) -> str:
    """Refund an order."""
    raise RuntimeError(f"refund service down for {order_id}")


async def slow_refund(order_id: str) -> str:
    """Refund an order (slowly)."""
    await asyncio.sleep(30)
    return "refunded"


def client(turns):
    return ReplayChatCompletionClient(turns, model_info=INFO)


async def main():
    # 1. multi-step tool use by one agent in a team
    calc = AssistantAgent("calc", model_client=client([call("add", {"a": 2, "b": 3}, "call_1"),
                                                       call("add", {"a": 5, "b": 10}, "call_2", 30, 9),
                                                       text("15 TERMINATE")]),
                          tools=[add], max_tool_iterations=5, description="adds numbers")
    team = RoundRobinGroupChat([calc], termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(8))
    with otel_assay.trial("multi-step", version="v1") as t:
        res = await team.run(task="what is 2+3+10?")
        t.outcome(passed="15" in res.messages[-1].content)

    # 2. a tool error: AutoGen returns the error to the model, which answers
    sup = AssistantAgent("support", model_client=client([call("refund", {"order_id": "A1"}, "c1"),
                                                         text("sorry TERMINATE")]),
                         tools=[refund], max_tool_iterations=3)
    team = RoundRobinGroupChat([sup], termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(6))
    with otel_assay.trial("tool-error", version="v1") as t:
        res = await team.run(task="refund A1")
        t.outcome(passed="sorry" in res.messages[-1].content)

    # 3. a group chat of two agents
    researcher = AssistantAgent("researcher", model_client=client([call("lookup_order", {"order_id": "C3"}, "r1"),
                                                                   text("C3 is paid")]),
                                tools=[lookup_order], max_tool_iterations=3, description="looks orders up")
    writer = AssistantAgent("writer", model_client=client([text("Your order C3 is paid. TERMINATE", 40, 9)]),
                            description="writes the answer")
    team = RoundRobinGroupChat([researcher, writer], name="support_team",
                               termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(6))
    with otel_assay.trial("group-chat", version="v1") as t:
        res = await team.run(task="is C3 paid?")
        t.outcome(passed="paid" in res.messages[-1].content)

    # 4. a single agent run (no team), streamed
    solo = AssistantAgent("solo", model_client=client([call("add", {"a": 1, "b": 1}, "s1"), text("2")]),
                          tools=[add], max_tool_iterations=2)
    with otel_assay.trial("solo-stream", version="v1") as t:
        last = None
        async for m in solo.run_stream(task="1+1"):
            last = m
        t.outcome(passed=last.messages[-1].content == "2")

    # 5. an agent used as a tool (AgentTool, a stream tool: run_json_stream, not run_json)
    inner = AssistantAgent("adder", model_client=client([call("add", {"a": 2, "b": 3}, "i1"), text("5")]),
                           tools=[add], reflect_on_tool_use=True, description="adds numbers")
    outer = AssistantAgent("boss", model_client=client([call("adder", {"task": "2+3"}, "o1"), text("it is 5")]),
                           tools=[AgentTool(inner)], reflect_on_tool_use=True)
    with otel_assay.trial("agent-tool", version="v1") as t:
        res = await outer.run(task="what is 2+3?")
        t.outcome(passed=res.messages[-1].content == "it is 5")

    # 6. the run times out while a tool runs: the tool is cancelled
    slow = AssistantAgent("support", model_client=client([call("slow_refund", {"order_id": "A1"}, "z1")]),
                          tools=[slow_refund])
    try:
        with otel_assay.trial("tool-cancelled", version="v1"):
            await asyncio.wait_for(slow.run(task="refund A1"), 0.5)
    except TimeoutError:
        pass
    else:
        raise SystemExit("the run did not time out")

    # 7. a streamed team run whose consumer stops early
    chatty = AssistantAgent("chatty", model_client=client([text("one"), text("two"), text("three")]))
    team = RoundRobinGroupChat([chatty], termination_condition=MaxMessageTermination(4))
    with otel_assay.trial("stream-break", version="v1") as t:
        seen = []
        async for m in team.run_stream(task="count"):
            seen.append(m)
            if len(seen) == 2:
                break  # the first answer is enough
        t.outcome(passed=seen[-1].content == "one")
    await asyncio.sleep(0.1)  # the abandoned stream is closed by the event loop

    # 8. a selector group chat whose speaker-selection client is a class of the user's, used by
    # no agent and defined after every agent was built
    researcher = AssistantAgent("researcher", model_client=client([text("C3 is paid", 30, 4)]), description="looks up")
    writer = AssistantAgent("writer", model_client=client([text("Your order C3 is paid. TERMINATE", 40, 9)]),
                            description="writes the answer")

    class Picker(ReplayChatCompletionClient):
        async def create(self, messages, **kwargs):  # answers itself (no super().create)
            self.picks += 1
            return text("researcher" if self.picks == 1 else "writer", 7, 1)

    picker = Picker([], model_info=INFO)
    picker.picks = 0
    team = SelectorGroupChat([researcher, writer], model_client=picker, name="selector_team",
                             termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(6))
    with otel_assay.trial("selector", version="v1") as t:
        res = await team.run(task="is C3 paid?")
        t.outcome(passed="paid" in res.messages[-1].content and picker.picks == 1)


    # 9. the model provider is down: the team re-raises the agent's error as a bare
    # RuntimeError (its text, no cause), which is still an infrastructure error
    import httpx
    import openai

    class Down(ReplayChatCompletionClient):
        async def create(self, messages, **kwargs):
            raise openai.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions"))

    flaky = AssistantAgent("support", model_client=Down([], model_info=INFO))
    team = RoundRobinGroupChat([flaky], termination_condition=MaxMessageTermination(4))
    try:
        with otel_assay.trial("outage", version="v1"):
            await team.run(task="refund A1")
    except RuntimeError as e:
        assert e.__cause__ is None and "APIConnectionError" in str(e), repr(e)
    else:
        raise SystemExit("the team did not raise")

    # 10. a tool class of the user's whose run calls its base class's (both are wrapped), also
    # called directly, outside run_json and so without a span of AutoGen's
    from autogen_core import CancellationToken
    from autogen_core.tools import FunctionTool

    class LoudTool(FunctionTool):
        async def run(self, args, cancellation_token):
            return str(await super().run(args, cancellation_token)).upper()

    loud_tool = LoudTool(lookup_order, description="Look up an order, loudly.")
    loud = AssistantAgent("loud", model_client=client([call("lookup_order", {"order_id": "C3"}, "l1"), text("done")]),
                          tools=[loud_tool], max_tool_iterations=2)
    with otel_assay.trial("subclass-tool", version="v1") as t:
        direct = await loud_tool.run(loud_tool.args_type()(order_id="D4"), CancellationToken())
        res = await loud.run(task="is C3 paid?")
        t.outcome(passed=direct == "ORDER D4: PAID" and res.messages[-1].content == "done")


asyncio.run(main())
assert otel_assay.flush()
print("done")
