"""A scripted offline agent whose behaviour depends on the prompt, tools, model and context
it is built from (for the mutation tests). Deterministic per (scenario, trial index)."""

from __future__ import annotations

import otel_assay
from otel_assay.capture.trial import current_trial
from otel_assay.live.mutation import AgentConfig, tool_dict

from .agents import uniform

CONFIG = AgentConfig.from_dict({
    "prompt": "You route customer support tickets.\nRoute billing questions to billing.\n"
              "Always use the route_ticket tool.\nAnswer with the department name only.",
    "tools": [{"name": "route_ticket", "description": "Send the ticket to a department."},
              {"name": "lookup_customer", "description": "Find the customer record."}],
    "model": "gpt-4o",
    "models": ["claude-3-5-sonnet"],
    "context": ["Departments: sales, billing, authentication.",
                "Billing handles payments, invoices and refunds."],
})

MODEL_QUALITY = {"gpt-4o": 0.92, "claude-3-5-sonnet": 0.92, "gpt-4o-mini": 0.55}


def pass_probability(config: AgentConfig) -> float:
    """The ground truth: the chance this config routes a billing ticket to billing."""
    if "route_ticket" not in config.tool_names:
        return 0.0
    p = MODEL_QUALITY.get(config.model, 0.5)
    if not any("billing" in line.lower() and "route" in line.lower() for line in config.instructions):
        p -= 0.5                                  # the routing instruction is gone
    if not any("payments" in c for c in config.context):
        p -= 0.4                                  # the knowledge that payments are billing is gone
    tools = {tool_dict(t)["name"]: tool_dict(t) for t in config.tools}
    route = tools.get("route_ticket")
    if route is not None and "deprecated" in route.get("description", ""):
        p -= 0.4                                  # misled into not using the router
    return max(p, 0.0)


def make_agent(config: AgentConfig):
    p = pass_probability(config)
    route = "route_ticket" in config.tool_names

    def agent(text: str) -> str:
        t = current_trial()
        with otel_assay.step(config.model, kind="llm", model=config.model) as s:
            s.usage(input_tokens=100 + 10 * len(config.context), output_tokens=5)
        if not route:
            return "sales"                        # cannot route at all
        with otel_assay.step("route_ticket", kind="tool") as s:
            dept = "billing" if uniform("mut", t.scenario, t.index) < p else "sales"
            s.result(dept)
        return dept
    return agent


def broken_factory(config):
    return config.get("tools")  # the common mistake: an AgentConfig is not a dict
