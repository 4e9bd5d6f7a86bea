"""``otel-assay demo``: the whole collection path on one machine, offline.

Starts an OTLP receiver on 127.0.0.1, has an OpenTelemetry SDK with the official OTLP/HTTP
exporter send agent trials of two versions to it (a baseline and a candidate whose tool
lookups fail more often), writes the Parquet lake, and prints each version's trials and
pass rate from the lake with DuckDB.

This is the placeholder main job until the gate exists: then the demo runs the example
agents and the gate on the lake it writes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.trace import Status, StatusCode

from .collect.receiver import Collector, Receiver


@dataclass
class DemoResult:
    lake: Path
    spans_written: int
    rows: list[dict]


def _trial(tracer, rng: random.Random, version: str, scenario: str, index: int, fail_rate: float) -> None:
    common = {"assay.scenario": scenario, "assay.agent.version": version, "assay.run.id": f"demo-{version}",
              "assay.trial.index": index}
    failed = rng.random() < fail_rate
    with tracer.start_as_current_span(f"assay.trial {scenario}", attributes=common) as root:
        with tracer.start_as_current_span("invoke_agent support", attributes={
                **common, "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}):
            for step in range(rng.randint(1, 3)):
                with tracer.start_as_current_span("chat scripted-model", attributes={
                        **common, "gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted-model",
                        "gen_ai.provider.name": "scripted", "gen_ai.usage.input_tokens": rng.randint(200, 900),
                        "gen_ai.usage.output_tokens": rng.randint(10, 120)}):
                    pass
                tool = "lookup_order" if step == 0 else "search_policy"
                with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                        **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                        "gen_ai.tool.call.id": f"call_{index}_{step}",
                        "gen_ai.tool.call.arguments": f'{{"order_id": "A-{rng.randint(1, 999)}"}}'}) as span:
                    if failed and step == 0:
                        span.set_attribute("error.type", "LookupError")
                        span.set_status(Status(StatusCode.ERROR, "order not found"))
        root.set_attribute("assay.trial.outcome", "fail" if failed else "pass")


def run_demo(lake_dir: str | Path, *, trials: int = 40, seed: int = 7) -> DemoResult:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from .analyze.engine import Engine

    lake = Path(lake_dir)
    collector = Collector(lake, flush_seconds=0.2)
    receiver = Receiver(collector, grpc_addr=None, http_addr=("127.0.0.1", 0))
    receiver.start()
    try:
        port = receiver.listeners[0].port
        rng = random.Random(seed)
        for version, fail_rate in (("v1", 0.1), ("v2", 0.35)):
            tp = TracerProvider(resource=Resource.create({"service.name": "demo-agent", "service.version": version}))
            tp.add_span_processor(BatchSpanProcessor(
                OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces"), max_queue_size=100_000))
            tracer = tp.get_tracer("otel_assay.demo")
            for scenario in ("refund-request", "order-status"):
                for i in range(trials):
                    _trial(tracer, rng, version, scenario, i, fail_rate)
            tp.shutdown()
    finally:
        receiver.stop()
    with Engine(lake) as eng:
        rows = eng.query(
            "SELECT version, scenario, count(*) AS trials, "
            "round(avg(CASE WHEN outcome = 'pass' THEN 1.0 ELSE 0.0 END), 3) AS pass_rate "
            "FROM spans WHERE parent_span_id IS NULL AND name LIKE 'assay.trial %' "
            "GROUP BY ALL ORDER BY version, scenario").to_pylist()
    return DemoResult(lake, collector.stats.spans_written, rows)
