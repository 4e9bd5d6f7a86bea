"""A scripted offline ticket router for examples/scenarios/ticket_routing.yaml.

``OTEL_ASSAY_ROUTER_ERROR`` (default 0.05) is the chance a ticket is misrouted; the outcome of
each trial is a deterministic function of the trial's scenario and index, so reruns agree.
"""

from __future__ import annotations

import hashlib
import os

import otel_assay
from otel_assay.capture.trial import current_trial

RULES = {"payment": "billing", "money": "billing", "login": "authentication", "password": "authentication"}


def route(ticket: str) -> dict:
    t = current_trial()
    key = f"{t.scenario}/{t.index}" if t is not None else ticket
    u = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0 ** 64
    dept = next((d for w, d in RULES.items() if w in ticket.lower()), "sales")
    if u < float(os.environ.get("OTEL_ASSAY_ROUTER_ERROR", "0.05")):
        dept = "sales"
    with otel_assay.step("scripted-router-1", kind="llm", model="scripted-router-1") as s:
        s.usage(input_tokens=150, output_tokens=12)
    with otel_assay.step("route_ticket", kind="tool") as s:
        s.result(dept)
    return {"department": dept, "text": f"Routed to {dept}"}
