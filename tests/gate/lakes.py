"""Small hand-built lakes (OTel SDK -> ParquetSpanExporter) for the gate's bad-input and
unit tests, where the example agent's behaviour is not the point."""

from __future__ import annotations

import random
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_assay.collect import ParquetSpanExporter


def write_trials(lake: Path, trials: list[dict], seed: int = 0) -> Path:
    """One trace per trial: ``{"scenario", "version", "outcome" ("pass"/"fail"/None),
    "tools": [...]}``; ``scenario=None`` writes a plain trace with no assay.* attributes."""
    rng = random.Random(seed)
    exporter = ParquetSpanExporter(str(lake))
    tp = TracerProvider(resource=Resource.create({"service.name": "test-agent"}))
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tp.get_tracer("tests.gate")
    for i, t in enumerate(trials):
        common = {}
        if t.get("scenario") is not None:
            common = {"assay.scenario": t["scenario"], "assay.agent.version": t["version"],
                      "assay.run.id": f"run-{t['version']}", "assay.trial.index": t.get("index", i)}
        with tracer.start_as_current_span(f"assay.trial {t.get('scenario')}", attributes=common) as root:
            with tracer.start_as_current_span("chat m", attributes={
                    **common, "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                    "gen_ai.usage.input_tokens": rng.randint(100, 200), "gen_ai.usage.output_tokens": rng.randint(10, 30)}):
                pass
            for tool in t.get("tools", ["lookup"]):
                with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                        **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}):
                    pass
            if t.get("outcome") is not None:
                root.set_attribute("assay.trial.outcome", t["outcome"])
    tp.shutdown()
    return lake
