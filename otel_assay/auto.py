"""``import otel_assay.auto``: capture every agent step of every supported framework.

Instruments LangGraph/LangChain, CrewAI, AutoGen, the OpenAI Agents SDK and smolagents,
each as soon as it is imported (before or after this import), and sends the spans to the
span lake (``OTEL_ASSAY_DIR``, default ``./traces``) or to an OTLP endpoint. The tracer
provider is attached to lazily, the first time a span is needed, so an application may
configure its own provider before or after this import; it is never replaced. Spans are
flushed at exit (``otel_assay.flush()`` flushes on demand). ``OTEL_ASSAY_DISABLED=1``
turns all of this off. See docs/capture.md.
"""

from .capture.registry import instrument as _instrument

_instrument()
