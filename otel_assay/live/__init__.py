"""otel_assay.live: run trials of an agent — as few as the statistics allow.

- :mod:`.scenarios` — scenario files (YAML, in the AgentAssay paper's test specification
  shape) with evaluators and config.
- :mod:`.runner` — :func:`run_suite`: trials under the trial API, SPRT early stopping,
  retries of infrastructure errors, per-trial timeouts, concurrency, resumption from the lake.
- :mod:`.stochastic` — the ``@stochastic`` decorator for pytest (see ``otel_assay.pytest_plugin``).
- :mod:`.mutation` — mutation testing of agent configurations (the AgentAssay paper's
  prompt, tool, model and context mutations: does the suite notice a broken agent?).
- :mod:`.display` — what ``otel-assay run`` and ``otel-assay mutate`` show.
"""

import importlib

_LAZY = {
    "load_scenarios": ("otel_assay.live.scenarios", "load_scenarios"),
    "parse_scenarios": ("otel_assay.live.scenarios", "parse_scenarios"),
    "run_suite": ("otel_assay.live.runner", "run_suite"),
    "stochastic": ("otel_assay.live.stochastic", "stochastic"),
    "AgentConfig": ("otel_assay.live.mutation", "AgentConfig"),
    "run_mutation": ("otel_assay.live.mutation", "run_mutation"),
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'otel_assay.live' has no attribute {name!r}")
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value
