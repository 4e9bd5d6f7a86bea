"""``opentelemetry_instrumentor`` entry points, so ``opentelemetry-instrument python app.py``
loads the otel-assay adapters. Each class instruments one framework through the same
registry as ``otel_assay.instrument`` (lazily: when the framework is imported). Subclasses
``BaseInstrumentor`` when opentelemetry-instrumentation is installed."""

from __future__ import annotations

from typing import Collection

try:
    from opentelemetry.instrumentation.instrumentor import BaseInstrumentor as _Base
except ImportError:  # pragma: no cover - opentelemetry-instrumentation not installed
    class _Base:  # minimal stand-in with the same public surface
        _is_instrumented_by_opentelemetry = False

        def instrument(self, **kwargs):
            self._instrument(**kwargs)
            self._is_instrumented_by_opentelemetry = True

        def uninstrument(self, **kwargs):
            self._uninstrument(**kwargs)
            self._is_instrumented_by_opentelemetry = False


class _AssayInstrumentor(_Base):
    framework = ""
    requires: tuple[str, ...] = ()

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()  # the framework is optional: we hook it when (if) it is imported

    def _instrument(self, **kwargs):
        from .registry import instrument
        instrument([self.framework])

    def _uninstrument(self, **kwargs):
        from .registry import uninstrument
        uninstrument([self.framework])


class LangChainInstrumentor(_AssayInstrumentor):
    framework = "langchain"


class CrewAIInstrumentor(_AssayInstrumentor):
    framework = "crewai"


class AutoGenInstrumentor(_AssayInstrumentor):
    framework = "autogen"


class OpenAIAgentsInstrumentor(_AssayInstrumentor):
    framework = "openai_agents"


class SmolagentsInstrumentor(_AssayInstrumentor):
    framework = "smolagents"
