"""The LangGraph support agent of examples/langgraph_agent.py as an `otel-assay run` agent.

    otel-assay run examples/scenarios/langgraph_support.yaml --version v1 --dir LAKE
    otel-assay run examples/scenarios/langgraph_support.yaml --version v2 --dir LAKE --baseline version=v1

The scripted model's behaviour depends on the trial's version (v2 is the regressed agent)
and is seeded by (version, scenario, trial index), so reruns and resumptions agree.
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from examples import _common as C
from examples.langgraph_agent import build_agent
from otel_assay.capture.trial import current_trial


def support(scenario: str) -> dict:
    t = current_trial()
    rng = C.trial_rng(0, t.version, t.scenario, t.index)
    order_id = C.make_order_id(rng)
    app = build_agent(C.plan(scenario, t.version, rng, order_id))
    out = app.invoke({"messages": [HumanMessage(C.prompt(scenario, order_id))]})
    return {"scenario": scenario, "order_id": order_id, "answer": out["messages"][-1].content}


def judge(output: dict, scenario) -> bool:
    return C.passed(output["scenario"], output["order_id"], output["answer"])
