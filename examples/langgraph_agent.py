"""A LangGraph customer-support agent, instrumented with one import, run offline.

    python examples/langgraph_agent.py --version v1 --trials 20 --dir LAKE
    python examples/langgraph_agent.py --version v2 --trials 20 --dir LAKE
    otel-assay gate LAKE --baseline version=v1 --candidate version=v2

Metamorphic pairs (a trial, then a follow-up on its transformed input; see _common.py):

    python examples/langgraph_agent.py --version v2 --trials 20 --dir LAKE --metamorphic inject_noise
    otel-assay metamorphic LAKE --config assay.yaml

The model is scripted (``ScriptedSupportModel``, a real LangChain ``BaseChatModel``) so the
example runs anywhere; its behaviour depends on the version (see _common.py). To use a
real model, replace one line in ``build_agent``:

    model = ChatOpenAI(model="gpt-4o-mini")      # pip install langchain-openai
"""

from __future__ import annotations

import otel_assay.auto  # noqa: F401  -- the one import: every LangGraph step becomes a span

import itertools
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import otel_assay
from otel_assay.metamorphic import follow_up

try:
    from . import _common as C
except ImportError:  # run as a script
    import _common as C

TOOLS = [StructuredTool.from_function(f) for f in C.TOOLS]


class ScriptedSupportModel(BaseChatModel):
    """Replays the scripted turns of one trial; retries a tool call once if it errored."""

    turns: list = []
    model_name: str = "scripted-support-1"
    cursor: Any = None

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kw):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools])

    def _generate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
        if self.cursor is None:
            self.cursor = itertools.count()
        last = messages[-1]
        if isinstance(last, ToolMessage) and last.status == "error":
            prev = next(m for m in reversed(messages) if isinstance(m, AIMessage) and m.tool_calls)
            call = dict(prev.tool_calls[0], id=prev.tool_calls[0]["id"] + "_retry")
            msg = AIMessage(content="", tool_calls=[call],
                            usage_metadata={"input_tokens": 400, "output_tokens": 20, "total_tokens": 420},
                            response_metadata={"model_name": self.model_name, "finish_reason": "tool_calls"})
            return ChatResult(generations=[ChatGeneration(message=msg)])
        t = self.turns[min(next(self.cursor), len(self.turns) - 1)]
        usage = {"input_tokens": t["in"], "output_tokens": t["out"], "total_tokens": t["in"] + t["out"]}
        if "tool" in t:
            msg = AIMessage(content="", tool_calls=[{"name": t["tool"], "args": t["args"], "id": t["id"],
                                                     "type": "tool_call"}], usage_metadata=usage,
                            response_metadata={"model_name": self.model_name, "finish_reason": "tool_calls"})
        else:
            msg = AIMessage(content=t["text"], usage_metadata=usage,
                            response_metadata={"model_name": self.model_name, "finish_reason": "stop"})
        return ChatResult(generations=[ChatGeneration(message=msg)])


_FAILED_ONCE: set[str] = set()


def _transient(tool):
    """issue_refund fails once per order for some orders (a flaky payment gateway)."""
    def run(order_id: str, amount: float) -> str:
        if order_id not in _FAILED_ONCE:
            try:
                return C.issue_refund(order_id, amount)
            except RuntimeError:
                _FAILED_ONCE.add(order_id)
                raise
        return f"refunded {amount:.2f} for {order_id}"
    return StructuredTool.from_function(run, name=tool.name, description=tool.description)


def build_agent(turns, tools=TOOLS):
    model = ScriptedSupportModel(turns=turns)  # real model: model = ChatOpenAI(model="gpt-4o-mini")
    tools = [t if t.name != "issue_refund" else _transient(t) for t in tools]
    bound = model.bind_tools(tools)
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda s: {"messages": [bound.invoke(s["messages"])]})
    g.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(name="support_agent")


def run_trials(version: str, n_trials: int, lake_dir: str | None = None, seed: int = 0) -> dict:
    """Run ``n_trials`` trials of each scenario for ``version``; spans go to ``lake_dir``
    (default OTEL_ASSAY_DIR or ./traces). Returns pass counts per scenario."""
    if lake_dir:
        otel_assay.capture.use_lake(lake_dir)
    result: dict[str, Any] = {"framework": "langgraph", "version": version, "trials": n_trials, "passed": {}}
    for scenario in C.SCENARIOS:
        ok = 0
        for i in range(n_trials):
            rng = C.trial_rng(seed, version, scenario, i)
            order_id = C.make_order_id(rng)
            app = build_agent(C.plan(scenario, version, rng, order_id))
            with otel_assay.trial(scenario, version=version, index=i) as t:
                out = app.invoke({"messages": [HumanMessage(C.prompt(scenario, order_id))]})
                good = C.passed(scenario, order_id, out["messages"][-1].content)
                t.outcome(passed=good)
            ok += good
        result["passed"][scenario] = ok
    otel_assay.flush()
    result["lake"] = otel_assay.capture.stats().get("target")
    return result


def run_metamorphic(version: str, n_pairs: int, lake_dir: str | None = None, seed: int = 0,
                    transform: str = "inject_noise", relation: str | None = None) -> dict:
    """Run ``n_pairs`` metamorphic pairs of each scenario for ``version``: a source trial, then
    a follow-up trial on its input transformed by ``transform`` (see ``C.MR_RELATIONS``),
    linked to the source as ``relation`` (default: the transform's). Returns pass counts of
    all the trials per scenario."""
    if lake_dir:
        otel_assay.capture.use_lake(lake_dir)
    if transform not in C.MR_RELATIONS:
        raise ValueError(f"unknown transform {transform!r}; one of {', '.join(C.MR_RELATIONS)}")
    relation = relation or C.MR_RELATIONS[transform]
    result: dict[str, Any] = {"framework": "langgraph", "version": version, "pairs": n_pairs, "relation": relation,
                              "transform": transform, "passed": {}}

    def run(scenario, i, text, tools, attributes=None):
        rng = C.trial_rng(seed, version, scenario, i)
        order_id = C.make_order_id(rng)
        app = build_agent(C.plan_for_input(scenario, version, rng, order_id, text, [t.name for t in tools]), tools)
        with otel_assay.trial(scenario, version=version, attributes=attributes) as t:
            out = app.invoke({"messages": [HumanMessage(text)]})
            t.outcome(passed=C.passed(scenario, order_id, out["messages"][-1].content))
        return t

    for scenario in C.SCENARIOS:
        ok = 0
        for i in range(n_pairs):
            order_id = C.make_order_id(C.trial_rng(seed, version, scenario, i))
            src = run(scenario, i, C.prompt(scenario, order_id), TOOLS)
            text, tools = C.follow_up_input(transform, scenario, order_id, TOOLS, i)
            fu = run(scenario, i, text, tools, follow_up(relation, src, transform))
            ok += src.passed + fu.passed
        result["passed"][scenario] = ok
    otel_assay.flush()
    result["lake"] = otel_assay.capture.stats().get("target")
    return result


if __name__ == "__main__":
    C.main(run_trials, "langgraph", run_metamorphic=run_metamorphic)
