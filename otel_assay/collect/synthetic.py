"""Synthetic agent traces as OTLP requests, for benchmarks and load tests.

Each trial is a trace shaped like a real agent run (trial root, agent span, alternating
chat and tool spans with GenAI attributes), so sizes and per-span costs are realistic.
"""

from __future__ import annotations

import random
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

TOOLS = ["search_orders", "lookup_customer", "refund", "send_email", "get_weather", "calculator"]
MODELS = ["gpt-4o-mini", "claude-3-5-haiku", "llama-3.1-70b"]


def _kv(key: str, value) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def request(n_trials: int, *, steps: int = 8, rng: random.Random | None = None,
            start_ns: int | None = None, version: str = "v1", first_index: int = 0, scenarios: int = 5,
            pass_rate: float = 0.8) -> ExportTraceServiceRequest:
    """An ExportTraceServiceRequest with ``n_trials`` traces of ``steps + 2`` spans each:
    trial indices from ``first_index``, spread over ``scenarios`` scenarios, each passing
    with probability ``pass_rate``."""
    rng = rng or random.Random()
    t0 = start_ns or time.time_ns()
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend([_kv("service.name", "synthetic-agent"), _kv("service.version", "1.0.0"),
                                   _kv("telemetry.sdk.language", "python")])
    ss = rs.scope_spans.add()
    ss.scope.name = "otel_assay.synthetic"
    for t in range(first_index, first_index + n_trials):
        trace_id = rng.getrandbits(128).to_bytes(16, "big")
        scenario = f"scenario-{t % scenarios}"
        common = [_kv("assay.scenario", scenario), _kv("assay.agent.version", version),
                  _kv("assay.run.id", "bench"), _kv("assay.trial.index", t)]
        root_id = rng.getrandbits(64).to_bytes(8, "big")
        agent_id = rng.getrandbits(64).to_bytes(8, "big")
        start = t0 + t * 1_000_000
        end = start + (steps + 2) * 100_000
        root = ss.spans.add(trace_id=trace_id, span_id=root_id, name=f"assay.trial {scenario}", kind=1,
                            start_time_unix_nano=start, end_time_unix_nano=end)
        root.attributes.extend(common + [_kv("assay.trial.outcome", "pass" if rng.random() < pass_rate else "fail")])
        agent = ss.spans.add(trace_id=trace_id, span_id=agent_id, parent_span_id=root_id, name="invoke_agent support",
                             kind=1, start_time_unix_nano=start + 1000, end_time_unix_nano=end - 1000)
        agent.attributes.extend(common + [_kv("gen_ai.operation.name", "invoke_agent"), _kv("gen_ai.agent.name", "support")])
        for s in range(steps):
            s_start = start + 2000 + s * 100_000
            span = ss.spans.add(trace_id=trace_id, span_id=rng.getrandbits(64).to_bytes(8, "big"),
                                parent_span_id=agent_id, kind=3 if s % 2 == 0 else 1,
                                start_time_unix_nano=s_start, end_time_unix_nano=s_start + rng.randint(1000, 90_000))
            if s % 2 == 0:
                model = MODELS[t % len(MODELS)]
                span.name = f"chat {model}"
                span.attributes.extend(common + [
                    _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.request.model", model),
                    _kv("gen_ai.provider.name", "openai"), _kv("gen_ai.usage.input_tokens", rng.randint(100, 2000)),
                    _kv("gen_ai.usage.output_tokens", rng.randint(5, 300))])
            else:
                tool = rng.choice(TOOLS)
                span.name = f"execute_tool {tool}"
                span.attributes.extend(common + [
                    _kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", tool),
                    _kv("gen_ai.tool.call.id", f"call_{rng.getrandbits(40):x}"),
                    _kv("gen_ai.tool.call.arguments", f'{{"id": {rng.randint(1, 10_000)}}}')])
    return req


def span_ids(req: ExportTraceServiceRequest) -> list[str]:
    return [s.span_id.hex() for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
