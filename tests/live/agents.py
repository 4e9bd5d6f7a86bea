"""Scripted offline agents for the live-trial tests and benches.

Each agent's behaviour is a deterministic function of (seed, scenario, trial index, attempt),
read from the trial it runs in, so results do not depend on concurrency or timing. They
record real steps (an LLM call with token usage and a tool call) through ``otel_assay.step``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

import otel_assay
from otel_assay.capture.trial import current_trial


def uniform(*key) -> float:
    h = hashlib.sha256(repr(key).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0 ** 64


def _where():
    t = current_trial()
    if t is None:
        return ("-", 0, 0)
    return (t.scenario, t.index, t.extra.get("assay.trial.attempt", 0))


def _steps(department: str, tokens: int = 120):
    with otel_assay.step("scripted-router-1", kind="llm", model="scripted-router-1", provider="scripted") as s:
        s.usage(input_tokens=tokens, output_tokens=20)
    with otel_assay.step("route_ticket", kind="tool") as s:
        s.result(department)


class Router:
    """Routes a ticket to ``billing`` with probability ``p`` (else ``sales``)."""

    def __init__(self, p: float, seed: int = 0, *, infra_every: int = 0, sleep: float = 0.0, hang_index: int | None = None):
        self.p, self.seed, self.infra_every, self.sleep, self.hang_index = p, seed, infra_every, sleep, hang_index
        self.calls: list[tuple] = []

    def __call__(self, text: str) -> str:
        sc, idx, attempt = _where()
        self.calls.append((sc, idx, attempt))
        if self.infra_every and idx % self.infra_every == 0 and attempt == 0:
            raise ConnectionError("scripted provider unavailable")
        if self.hang_index is not None and idx == self.hang_index:
            with otel_assay.step("route_ticket", kind="tool") as s:
                s.result("pending")
            time.sleep(5)
        if self.sleep:
            time.sleep(self.sleep)
        dept = "billing" if uniform(self.seed, sc, idx) < self.p else "sales"
        _steps(dept)
        return dept


class AsyncRouter(Router):
    async def __call__(self, text: str) -> str:  # type: ignore[override]
        sc, idx, attempt = _where()
        self.calls.append((sc, idx, attempt))
        await asyncio.sleep(self.sleep or 0.001)
        dept = "billing" if uniform(self.seed, sc, idx) < self.p else "sales"
        _steps(dept)
        return dept


good = Router(0.99, seed=1)
bad = Router(0.4, seed=2)
flaky = Router(0.99, seed=3, infra_every=3)
middling = Router(0.78, seed=5)
