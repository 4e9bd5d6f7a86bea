"""One small LangGraph agent run; argv[1] = auto-first | auto-last | implicit (no trial
call: OTEL_ASSAY_SCENARIO makes each top-level invocation a trial) | ctrl-c (Ctrl-C during
the tool call, caught outside the trial) | uninstrument (a run after uninstrument(), then
one after instrumenting again)."""

import sys

MODE = sys.argv[1]
if MODE in ("auto-first", "ctrl-c", "uninstrument"):
    import otel_assay.auto  # noqa: F401

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

if MODE in ("auto-last", "implicit"):
    import otel_assay.auto  # noqa: F401,E402


@tool
def secret_lookup(customer: str) -> str:
    """Look up a customer."""
    if MODE == "ctrl-c":
        raise KeyboardInterrupt
    return f"{customer} owes 12 EUR"


class Scripted(GenericFakeChatModel):
    def bind_tools(self, tools, **kw):
        return self


def app():
    m = Scripted(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "secret_lookup", "args": {"customer": "ann"}, "id": "x1",
                                           "type": "tool_call"}],
                  usage_metadata={"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
                  response_metadata={"model_name": "scripted-1"}),
        AIMessage(content="ann owes 12", usage_metadata={"input_tokens": 4, "output_tokens": 3, "total_tokens": 7},
                  response_metadata={"model_name": "scripted-1"})]))
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda s: {"messages": [m.invoke(s["messages"])]})
    g.add_node("tools", ToolNode([secret_lookup]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(name="billing")


if MODE == "implicit":
    for _ in range(2):
        app().invoke({"messages": [HumanMessage("what does ann owe?")]})
elif MODE == "ctrl-c":
    import otel_assay
    try:
        with otel_assay.trial("order", version=MODE):
            app().invoke({"messages": [HumanMessage("what does ann owe?")]})
    except KeyboardInterrupt:
        print("interrupted")
elif MODE == "uninstrument":
    import otel_assay
    for scenario, instrumented in (("before", True), ("after", False), ("again", True)):
        if instrumented:
            otel_assay.instrument(["langgraph"])
        else:
            otel_assay.uninstrument()
        with otel_assay.trial(scenario, version=MODE):
            app().invoke({"messages": [HumanMessage("what does ann owe?")]})
else:
    import otel_assay
    with otel_assay.trial("order", version=MODE) as t:
        out = app().invoke({"messages": [HumanMessage("what does ann owe?")]})
        t.outcome(passed="12" in out["messages"][-1].content)
