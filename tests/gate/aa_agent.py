"""Record one scripted LangGraph agent under one instrumentation, for the cross-instrumentation
A/A test (tests/gate/test_conventions.py). Run in a fresh process per instrumentation, since
the global tracer provider can be set once:

    python tests/gate/aa_agent.py INSTRUMENTATION OUT.json AGENT FIRST_SEED N

INSTRUMENTATION is one of openinference, openllmetry, langsmith, otel_assay. Trial i (seed
FIRST_SEED + i) is one graph run, one trace: the scripted model asks for 1-3 tool calls
(add or mul, random arguments), then answers with a sentence of random length; token counts
are random. The behaviour depends on the seed and AGENT only ("v1", or "v2": more tool
calls and mul preferred, a real change), never on the instrumentation, so trial i reads the
same under each. The spans go to OUT.json as one OTLP/JSON document.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "otlp"))
import record  # noqa: E402  (the fixtures' recorder: capture, OTLP/JSON, the instrumentors)

WORDS = "the sum of these numbers is small and the product is larger than it".split()


def script(agent: str, seed: int):
    """The scripted model's turns for one trial: tool-call turns, then the answer."""
    from langchain_core.messages import AIMessage

    rng = random.Random(f"{agent}:{seed}")
    calls = rng.choice([1, 2, 3] if agent == "v1" else [2, 3, 3])
    p_mul = 0.3 if agent == "v1" else 0.7
    turns = []
    for c in range(calls):
        name = "mul" if rng.random() < p_mul else "add"
        turns.append(AIMessage(
            content="", tool_calls=[{"name": name, "args": {"a": rng.randint(1, 9), "b": rng.randint(1, 9)},
                                     "id": f"call_{c}", "type": "tool_call"}],
            usage_metadata=_usage(rng.randint(40, 120), rng.randint(5, 20))))
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))) + "."
    turns.append(AIMessage(content=text, usage_metadata=_usage(rng.randint(80, 200), len(text.split()) + 2)))
    return turns


def _usage(i: int, o: int) -> dict:
    return {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}


def run(agent: str, first: int, n: int, after=lambda: None) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def add(a: int, b: int) -> int:
        """Add two ints."""
        return a + b

    @tool
    def mul(a: int, b: int) -> int:
        """Multiply two ints."""
        return a * b

    class ScriptedChat(GenericFakeChatModel):
        def bind_tools(self, tools, **kw):
            return self

    for seed in range(first, first + n):
        model = ScriptedChat(messages=iter(script(agent, seed)))
        g = StateGraph(MessagesState)
        g.add_node("agent", lambda s, m=model: {"messages": [m.invoke(s["messages"])]})
        g.add_node("tools", ToolNode([add, mul]))
        g.add_edge(START, "agent")
        g.add_conditional_edges("agent", tools_condition)
        g.add_edge("tools", "agent")
        g.compile(name="calc_graph").invoke({"messages": [HumanMessage(f"task {seed}")]})
        after()


def main(instrumentation: str, out: str, agent: str, first: str, n: str) -> None:
    tp, exporter = record.capture()
    if instrumentation == "openinference":
        record._openinference_langchain(tp)
    elif instrumentation == "openllmetry":
        record._traceloop_langchain(tp)
    elif instrumentation == "otel_assay":
        import otel_assay
        otel_assay.instrument(["langchain"])
    elif instrumentation != "langsmith":  # LangSmith traces through its environment (LANGSMITH_ENV)
        raise SystemExit(f"unknown instrumentation {instrumentation!r}")
    after = lambda: None  # noqa: E731
    if instrumentation == "langsmith":
        # LangSmith exports from a background queue; waiting after each run keeps it from
        # falling behind (left to pile up over hundreds of runs, it lost spans)
        from langchain_core.tracers.langchain import wait_for_all_tracers
        after = wait_for_all_tracers
    run(agent, int(first), int(n), after)
    tp.force_flush()
    record.OUT = Path(out).parent
    record.save(Path(out).stem, exporter)


ENV = {"langsmith": record.LANGSMITH_ENV}

if __name__ == "__main__":
    main(*sys.argv[1:])
