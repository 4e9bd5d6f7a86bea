"""Verdicts back into OpenTelemetry: an ``assay.gate`` span carrying one
``gen_ai.evaluation.result`` event per check (GenAI semantic conventions), so a dashboard
that shows the agent's traces shows the gate's verdicts next to them.

The span's trace has no ``assay.scenario``, so it never counts as a trial when the lake
is gated again.
"""

from __future__ import annotations

import os

from .. import semconv

EXPLANATION = "gen_ai.evaluation.explanation"
_SCORE = {"PASS": 1.0, "FAIL": 0.0, "INCONCLUSIVE": 0.5}


def _events(result):
    for r in result.scenarios:
        for c in r.checks:
            if c.verdict == "SKIPPED":
                continue
            attrs = {semconv.GEN_AI_EVALUATION_NAME: f"otel-assay.{c.name}",
                     semconv.GEN_AI_EVALUATION_SCORE_LABEL: c.verdict.lower(),
                     semconv.GEN_AI_EVALUATION_SCORE_VALUE: _SCORE[c.verdict],
                     EXPLANATION: c.reason, "assay.scenario.evaluated": r.scenario, "assay.gate.gating": c.gating}
            for k in ("pvalue_adjusted", "drop", "t2", "d_eff"):
                v = c.stats.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    attrs[f"assay.gate.{k}"] = v
            yield attrs
    yield {semconv.GEN_AI_EVALUATION_NAME: "otel-assay.decision",
           semconv.GEN_AI_EVALUATION_SCORE_LABEL: result.decision,
           semconv.GEN_AI_EVALUATION_SCORE_VALUE: {"deploy": 1.0, "block": 0.0, "manual": 0.5}[result.decision],
           EXPLANATION: "; ".join(result.reasons)[:4000]}


def emit_results(result, target: str, lake: str | os.PathLike | None = None) -> int:
    """Emit the verdicts; ``target`` is ``"lake"`` (write into ``lake``) or an OTLP/HTTP
    traces URL. Returns the number of events. Uses its own tracer provider, so the
    application's global one is left alone."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    if target == "lake":
        from ..collect.exporter import ParquetSpanExporter
        exporter = ParquetSpanExporter(str(lake))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter(endpoint=target)
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-assay-gate"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("otel_assay.gate")
    n = 0
    attrs = {"assay.gate.decision": result.decision, "assay.gate.exit_code": result.exit_code,
             "assay.gate.candidate": result.candidate["selection"]}
    if result.baseline:
        attrs["assay.gate.baseline"] = result.baseline["selection"]
    with tracer.start_as_current_span("assay.gate", attributes=attrs) as span:
        for ev in _events(result):
            span.add_event(semconv.GEN_AI_EVALUATION_RESULT, ev)
            n += 1
    provider.shutdown()
    return n
