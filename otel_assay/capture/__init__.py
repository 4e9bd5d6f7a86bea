"""Capture: the trial API, generic steps, the tracer-provider policy and one adapter per
framework (langchain.py, crewai.py, autogen.py, openai_agents.py, smolagents.py).
See docs/capture.md for configuration."""

_LAZY = {
    "trial": ("otel_assay.capture.trial", "trial"),
    "Trial": ("otel_assay.capture.trial", "Trial"),
    "current_trial": ("otel_assay.capture.trial", "current_trial"),
    "step": ("otel_assay.capture.step", "step"),
    "flush": ("otel_assay.capture._runtime", "flush"),
    "stats": ("otel_assay.capture._runtime", "stats"),
    "use_lake": ("otel_assay.capture._runtime", "use_lake"),
    "instrument": ("otel_assay.capture.registry", "instrument"),
    "uninstrument": ("otel_assay.capture.registry", "uninstrument"),
}


def __getattr__(name):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'otel_assay.capture' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(target[0]), target[1])
