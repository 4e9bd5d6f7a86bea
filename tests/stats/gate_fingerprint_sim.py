"""Synthetic fingerprints with the columns the gate tests by default (the fingerprints view
without its structural columns and latency_s, plus one ``tool:<name>`` share per tool), for the simulations of the
anytime fingerprint test and its bench.

The marginals are what agents produce: small discrete counts with many ties (steps, tool
calls), rare binary events (errors), log-normal tokens with an occasional huge context
(heavy right tail), cost proportional to tokens, latency growing with the LLM calls. Each
keyword moves one aspect of the candidate, so that a shift has a plain-words meaning.
"""

from __future__ import annotations

import numpy as np

FEATURES = (
    "n_steps", "output_tokens", "output_complexity", "frac_llm", "frac_tool", "frac_respond", "error_flag",
    "recovery_rate", "total_tokens", "tokens_per_step", "cost_usd", "cost_per_step",
    "tool:search", "tool:calc", "tool:fetch",
)
# which way is better, as the gate's DIRECTION has it (-1: less is better, +1: more, 0: neither)
DIRECTIONS = tuple({"n_steps": -1, "error_flag": -1, "recovery_rate": +1, "total_tokens": -1, "tokens_per_step": -1,
                    "cost_usd": -1, "cost_per_step": -1, "latency_s": -1}.get(f, 0) for f in FEATURES)
TOOL_SHARES = (0.5, 0.3, 0.2)


def gate_fingerprints(rng: np.random.Generator, n: int, *, extra_tool: float = 0.0, token_factor: float = 1.0,
                      error_rate: float = 0.05, tails: str = "lognormal") -> np.ndarray:
    """n trials x len(FEATURES).

    - ``extra_tool``: the share of trials that make one more tool call (and the LLM call
      that asks for it).
    - ``token_factor``: multiplies every LLM call's input tokens (and so the total tokens and
      cost; the answer's length, a feature with no better side, stays).
    - ``error_rate``: the chance that a trial has a failed step.
    - ``tails``: ``"lognormal"`` (3 % of trials carry a tenfold context) or ``"pareto"``
      (input tokens with tail index 1.5: infinite variance).
    """
    tools = 2 + rng.binomial(3, 0.4, size=n) + (rng.random(n) < extra_tool)
    picks = np.array([rng.multinomial(t, TOOL_SHARES) for t in tools])
    retries = rng.poisson(0.3, size=n)
    n_llm = tools + 1 + retries
    n_steps = n_llm + tools + 1  # LLM calls, tool calls and the answer
    out_tokens = np.round(rng.lognormal(5.0, 0.8, size=n))
    if tails == "pareto":
        per_call = 800.0 * (1.0 + rng.pareto(1.5, size=n))
    else:
        per_call = rng.lognormal(7.0, 0.6, size=n) * np.where(rng.random(n) < 0.03, 10.0, 1.0)
    total_tokens = np.round(per_call * n_llm * token_factor) + out_tokens
    cost = np.round(total_tokens * 3e-6 + out_tokens * 1.2e-5, 6)
    error = (rng.random(n) < error_rate).astype(float)
    recovery = np.where(error > 0, rng.choice([0.0, 0.5, 1.0], size=n, p=[0.3, 0.2, 0.5]), 1.0)
    complexity = np.round(np.clip(rng.normal(0.45, 0.1, size=n), 0.0, 1.0), 2)
    return np.column_stack([
        n_steps, out_tokens, complexity, (n_llm - 1) / n_steps, tools / n_steps, 1.0 / n_steps, error, recovery,
        total_tokens, total_tokens / n_steps, cost, cost / n_steps, picks / n_steps[:, None],
    ]).astype(float)


def count_fingerprints(rng: np.random.Generator, n: int) -> np.ndarray:
    """Only small counts and flags: almost every pair ties on almost every feature."""
    return np.column_stack([rng.poisson(0.5, size=n), rng.binomial(2, 0.1, size=n), rng.random(n) < 0.03,
                            rng.poisson(3.0, size=n), np.full(n, 4.0)]).astype(float)
