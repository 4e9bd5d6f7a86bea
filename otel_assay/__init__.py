"""otel-assay: did this change make my agent worse?

OpenTelemetry spans -> a Parquet span lake -> DuckDB views -> statistics -> a CI gate.

Capture API (imported lazily, so ``import otel_assay`` stays cheap and imports no
framework): ``trial``, ``step``, ``flush``, ``instrument``, ``uninstrument``; and
``import otel_assay.auto`` to instrument every supported framework.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "trial", "step", "flush", "instrument", "uninstrument", "stochastic"]

_LAZY = {
    "trial": ("otel_assay.capture.trial", "trial"),
    "step": ("otel_assay.capture.step", "step"),
    "flush": ("otel_assay.capture._runtime", "flush"),
    "instrument": ("otel_assay.capture.registry", "instrument"),
    "uninstrument": ("otel_assay.capture.registry", "uninstrument"),
    "stochastic": ("otel_assay.live.stochastic", "stochastic"),
}


def __getattr__(name):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'otel_assay' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
