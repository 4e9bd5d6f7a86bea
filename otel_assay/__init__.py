"""otel-assay: did this change make my agent worse?

OpenTelemetry spans -> a Parquet span lake -> DuckDB views -> statistics -> a CI gate.

Capture API (imported lazily, so ``import otel_assay`` stays cheap and imports no
framework): ``trial``, ``step``, ``flush``, ``instrument``, ``uninstrument``; and
``import otel_assay.auto`` to instrument every supported framework.
"""

import importlib
import sys

__version__ = "0.1.0"

__all__ = ["__version__", "trial", "step", "flush", "instrument", "uninstrument", "stochastic"]

_LAZY = {
    "trial": "otel_assay.capture.trial",
    "step": "otel_assay.capture.step",
    "flush": "otel_assay.capture._runtime",
    "instrument": "otel_assay.capture.registry",
    "uninstrument": "otel_assay.capture.registry",
    "stochastic": "otel_assay.live.stochastic",
}


def _lazy_exports(package: str, exports: dict[str, str]):
    """A module ``__getattr__`` for ``package`` that imports each name of ``exports`` from its
    module (absolute, or relative to ``package``) on first use: importing the package stays
    cheap, and a name's module and its dependencies load only for code that uses it."""
    def __getattr__(name):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value
    return __getattr__


__getattr__ = _lazy_exports(__name__, _LAZY)


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
