"""Which adapters exist, and lazy activation: an adapter is activated when its framework is
imported (or immediately, if it already is), so ``import otel_assay.auto`` may come before
or after the framework's import."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from typing import Iterable

log = logging.getLogger("otel_assay.capture")

# name -> (module whose import triggers the adapter, adapter module)
FRAMEWORKS: dict[str, tuple[str, str]] = {
    "langchain": ("langchain_core", "otel_assay.capture.langchain"),
    "crewai": ("crewai", "otel_assay.capture.crewai"),
    "autogen": ("autogen_core", "otel_assay.capture.autogen"),
    "openai_agents": ("agents", "otel_assay.capture.openai_agents"),
    "smolagents": ("smolagents", "otel_assay.capture.smolagents"),
}
# further modules whose import completes an adapter (adapter.on_module(mod) is called);
# registered up front, so a hook never sees a half-imported module
EXTRA_HOOKS: dict[str, tuple[str, ...]] = {
    "autogen": ("autogen_agentchat.agents", "autogen_agentchat.teams"),
    "langchain": ("langgraph.pregel.main",),
}
ALIASES = {"langgraph": "langchain", "openai-agents": "openai_agents", "agents": "openai_agents",
           "autogen_agentchat": "autogen", "autogen-agentchat": "autogen"}

_LOCK = threading.RLock()
_WANTED: set[str] = set()     # frameworks the user asked for (hooks stay registered, this gates them)
_ACTIVE: set[str] = set()     # adapters currently instrumented
_HOOKED: set[str] = set()     # post-import hooks registered (wrapt cannot unregister them)


def _names(frameworks: Iterable[str] | str | None) -> list[str]:
    if frameworks is None:
        return list(FRAMEWORKS)
    if isinstance(frameworks, str):
        frameworks = [frameworks]
    out = []
    for f in frameworks:
        n = ALIASES.get(f.lower(), f.lower())
        if n not in FRAMEWORKS:
            raise ValueError(f"otel_assay.instrument: unknown framework {f!r}; known: {', '.join(FRAMEWORKS)}")
        out.append(n)
    return out


def _activate(name: str, module=None) -> None:
    with _LOCK:
        if name not in _WANTED or name in _ACTIVE:
            return
        try:
            adapter = importlib.import_module(FRAMEWORKS[name][1])
            if adapter.instrument(module):
                _ACTIVE.add(name)
        except Exception:
            log.exception("otel-assay: could not instrument %s", name)


def _on_extra(name: str, module) -> None:
    with _LOCK:
        if name not in _ACTIVE:
            return
    try:
        importlib.import_module(FRAMEWORKS[name][1]).on_module(module)
    except Exception:
        log.exception("otel-assay: could not instrument %s (%s)", name, getattr(module, "__name__", module))


def instrument(frameworks: Iterable[str] | str | None = None) -> list[str]:
    """Instrument the given frameworks (default: every supported one), now if imported,
    else as soon as they are. Idempotent. Returns the names requested."""
    from . import _runtime
    if _runtime.disabled():
        return []
    from .trial import patch_threads
    patch_threads()
    names = _names(frameworks)
    import wrapt
    for name in names:
        with _LOCK:
            _WANTED.add(name)
            trigger = FRAMEWORKS[name][0]
            if name not in _HOOKED:
                _HOOKED.add(name)
                for extra in EXTRA_HOOKS.get(name, ()):
                    if extra not in sys.modules:
                        wrapt.register_post_import_hook(lambda mod, _n=name: _on_extra(_n, mod), extra)
                if trigger not in sys.modules:
                    wrapt.register_post_import_hook(lambda mod, _n=name: _activate(_n, mod), trigger)
                    continue
        if trigger in sys.modules:
            _activate(name, sys.modules[trigger])
    return names


def uninstrument(frameworks: Iterable[str] | str | None = None) -> list[str]:
    """Undo :func:`instrument` for the given frameworks (default: all)."""
    names = _names(frameworks)
    for name in names:
        with _LOCK:
            _WANTED.discard(name)
            if name in _ACTIVE:
                try:
                    importlib.import_module(FRAMEWORKS[name][1]).uninstrument()
                finally:
                    _ACTIVE.discard(name)
    if not _WANTED:
        from .trial import unpatch_threads
        unpatch_threads()
    return names
