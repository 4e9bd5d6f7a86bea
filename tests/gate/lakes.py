"""Small hand-built lakes (OTel SDK -> ParquetSpanExporter) for the gate's bad-input and
unit tests, where the example agent's behaviour is not the point."""

from __future__ import annotations

import random
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_assay.collect.exporter import ParquetSpanExporter


class _SeededIds(RandomIdGenerator):
    """Trace and span ids from a seeded generator: the trials' order by trace id (which the
    fingerprint matrix and so its permutation p-value follow) is the same in every run."""

    def __init__(self, seed: int):
        self._rng = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._rng.getrandbits(128) or 1


def write_trials(lake: Path, trials: list[dict], seed: int = 0, *, id_seed: int | None = None) -> Path:
    """One trace per trial: ``{"scenario", "version", "outcome" ("pass"/"fail"/None),
    "tools": [...], "cost": the LLM span's llm.cost.total (optional), "follow_up": (relation,
    index of an earlier trial in ``trials``) for a metamorphic follow-up (optional), "error_class"
    (optional), "usage": False for an LLM call that reports no token counts (optional), "operation":
    the LLM span's gen_ai.operation.name (optional, default chat), "run": its assay.run.id
    (optional, default ``run-<version>``)}``;
    ``scenario=None`` writes a plain trace with no assay.* attributes. ``id_seed``: ids from
    a seeded generator instead of the SDK's random ones (a test that needs an exact p-value)."""
    rng = random.Random(seed)
    exporter = ParquetSpanExporter(str(lake))
    tp = TracerProvider(resource=Resource.create({"service.name": "test-agent"}),
                        id_generator=_SeededIds(id_seed) if id_seed is not None else RandomIdGenerator())
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tp.get_tracer("tests.gate")
    trace_ids = []
    for i, t in enumerate(trials):
        common = {}
        if t.get("scenario") is not None:
            common = {"assay.scenario": t["scenario"], "assay.agent.version": t["version"],
                      "assay.run.id": t.get("run", f"run-{t['version']}"), "assay.trial.index": t.get("index", i)}
        root_attrs = dict(common)
        if t.get("follow_up"):
            from otel_assay.metamorphic import follow_up

            relation, source = t["follow_up"]
            root_attrs.update(follow_up(relation, trace_ids[source], "test"))
        with tracer.start_as_current_span(f"assay.trial {t.get('scenario')}", attributes=root_attrs) as root:
            trace_ids.append(format(root.get_span_context().trace_id, "032x"))
            with tracer.start_as_current_span("chat m", attributes={
                    **common, "gen_ai.operation.name": t.get("operation", "chat"), "gen_ai.request.model": "m",
                    **({"gen_ai.usage.input_tokens": rng.randint(100, 200),
                        "gen_ai.usage.output_tokens": rng.randint(10, 30)} if t.get("usage", True) else {}),
                    **({"llm.cost.total": t["cost"]} if "cost" in t else {})}):
                pass
            for tool in t.get("tools", ["lookup"]):
                with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                        **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}):
                    pass
            if t.get("outcome") is not None:
                root.set_attribute("assay.trial.outcome", t["outcome"])
            if t.get("error_class") is not None:
                root.set_attribute("assay.error.class", t["error_class"])
    tp.shutdown()
    return lake
