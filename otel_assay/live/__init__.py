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

from .. import _lazy_exports

_LAZY = {
    "load_scenarios": ".scenarios", "parse_scenarios": ".scenarios", "run_suite": ".runner",
    "stochastic": ".stochastic", "AgentConfig": ".mutation", "run_mutation": ".mutation",
}

__all__ = sorted(_LAZY)
__getattr__ = _lazy_exports(__name__, _LAZY)
