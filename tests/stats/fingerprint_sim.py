"""Synthetic fingerprint matrices shaped like the real ones (DESIGN §7): skewed, discrete,
collinear columns. Used by the Hotelling simulations and the benches."""

from __future__ import annotations

import numpy as np

FEATURES = (
    "tool_frac_A", "tool_frac_B", "tool_frac_C", "tool_frac_D",
    "step_count", "max_depth", "distinct_branches", "output_tokens", "output_complexity",
    "kind_frac_llm", "kind_frac_tool", "error_flag", "recovery_rate",
    "total_tokens", "tokens_per_step", "total_cost", "latency_s",
)
TOOL_CALLS = 8


def simulate_fingerprints(rng: np.random.Generator, n: int, p_tool_a: float = 0.5) -> np.ndarray:
    """n trials x len(FEATURES). Every trial makes 8 tool calls; tool A is picked with
    probability ``p_tool_a`` and B, C, D share the rest equally. Nothing else depends on
    ``p_tool_a``: the other features have one distribution in both arms.

    The agent follows a fixed plan (8 tool calls), so its graph depth and branch count are
    constant columns, as they are for such agents in practice; retries add LLM steps. The
    dependence between the other features follows how they arise: tokens, cost and latency
    grow with the LLM steps; complexity with the output length; recovery needs an error.
    Marginals are skewed (log-normal tokens, gamma tool time) or discrete (counts, flags)."""
    other = (1.0 - p_tool_a) / 3.0
    tools = rng.multinomial(TOOL_CALLS, [p_tool_a, other, other, other], size=n)
    retries = rng.poisson(0.4, size=n)
    llm_steps = TOOL_CALLS + 1 + retries
    steps = llm_steps + TOOL_CALLS
    depth = np.full(n, 2.0)
    branches = np.full(n, 3.0)
    out_tokens = np.round(rng.lognormal(5.5, 0.6, size=n))
    complexity = np.clip(0.1 + 0.06 * np.log(out_tokens) + rng.normal(0.0, 0.04, size=n), 0.0, 1.0)
    error = (rng.random(n) < 0.12).astype(float)
    recovery = np.where(error > 0, (rng.random(n) < 0.7).astype(float), 0.0)
    in_tokens = np.round(rng.lognormal(7.0, 0.5, size=n) * llm_steps ** 1.1)
    total_tokens = in_tokens + out_tokens
    cost = total_tokens * 2.5e-6 + out_tokens * 7.5e-6
    latency = 0.3 * llm_steps + 4e-5 * total_tokens * rng.lognormal(0.0, 0.2, size=n) \
        + rng.gamma(2.0 * TOOL_CALLS, 0.05, size=n)
    return np.column_stack([
        tools / steps[:, None], steps, depth, branches, out_tokens, complexity,
        llm_steps / steps, TOOL_CALLS / steps, error, recovery,
        total_tokens, total_tokens / steps, cost, latency,
    ])
