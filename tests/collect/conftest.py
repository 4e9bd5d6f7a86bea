"""Shared helpers for the collection tests: real OTel SDK spans, a real collector process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

import pyarrow as pa
import pyarrow.parquet as pq

from otel_assay.lake.files import Lake, check_lake_file
from otel_assay.lake.rows import stringify
from otel_assay.semconv import PROMOTED_SPAN_ATTRIBUTES


def agent_trial(tracer, scenario: str = "refund", index: int = 0, *, n_tools: int = 2, fail: bool = False):
    """One trial shaped like a real agent run: trial root, agent, chat, tools, an error."""
    common = {"assay.scenario": scenario, "assay.agent.version": "v1", "assay.run.id": "run-1",
              "assay.trial.index": index}
    with tracer.start_as_current_span(f"assay.trial {scenario}", attributes=common) as root:
        with tracer.start_as_current_span("invoke_agent support", kind=SpanKind.INTERNAL,
                                          attributes={**common, "gen_ai.operation.name": "invoke_agent",
                                                      "gen_ai.agent.name": "support"}) as agent:
            for i in range(n_tools):
                with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes={
                    **common, "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.response.model": "gpt-4o-mini-2024-07-18", "gen_ai.provider.name": "openai",
                    "gen_ai.usage.input_tokens": 120 + i, "gen_ai.usage.output_tokens": 30,
                    "gen_ai.response.finish_reasons": ("tool_calls",),
                    "gen_ai.request.temperature": 0.2, "gen_ai.request.stop_sequences": ("\n\n", "END"),
                    "flag.seen": True, "latency.buckets": (1.5, 2.25),
                }) as chat:
                    chat.add_event("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls"})
                with tracer.start_as_current_span(f"execute_tool lookup_{i}", attributes={
                    **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"lookup_{i}",
                    "gen_ai.tool.call.id": f"call_{index}_{i}",
                    "gen_ai.tool.call.arguments": '{"order_id": "A-17", "deep": {"x": [1, 2]}}',
                    "gen_ai.tool.call.result": "ok ünïcödé ✓",
                }, links=[Link(chat.get_span_context(), {"link.kind": "caused_by"})]):
                    pass
            if fail:
                with tracer.start_as_current_span("execute_tool refund", attributes={
                    **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund"}) as bad:
                    bad.record_exception(ValueError("amount exceeds limit"))
                    bad.set_attribute("error.type", "ValueError")
                    bad.set_status(Status(StatusCode.ERROR, "amount exceeds limit"))
            agent.set_attribute("gen_ai.agent.id", "agent-7")
        root.set_attribute("assay.trial.outcome", "fail" if fail else "pass")
        root.set_attribute("assay.trial.score", 0.25 if fail else 1.0)


def make_provider(*processors, service="shop-agent", resource=None):
    tp = TracerProvider(resource=Resource.create({"service.name": service, "service.version": "1.2.3",
                                                  "deployment.environment": "test", **(resource or {})}))
    for p in processors:
        tp.add_span_processor(p)
    return tp


def recorded_trials(n: int, *, service="shop-agent", resource=None, **kw):
    """Run ``n`` trials through an in-memory exporter; return the SDK's finished spans."""
    mem = InMemorySpanExporter()
    tp = make_provider(SimpleSpanProcessor(mem), service=service, resource=resource)
    tracer = tp.get_tracer("tests.agent", "0.1")
    for i in range(n):
        agent_trial(tracer, index=i, fail=(i % 3 == 2), **kw)
    tp.shutdown()
    return mem.get_finished_spans()


def expected_view(spans) -> dict[str, dict]:
    """What the lake must hold for each SDK span, keyed by span_id (attribute values stringified)."""
    out = {}
    for s in spans:
        attrs = {k: stringify(list(v) if isinstance(v, tuple) else v) for k, v in (s.attributes or {}).items()}
        out[format(s.context.span_id, "016x")] = {
            "trace_id": format(s.context.trace_id, "032x"),
            "parent_span_id": format(s.parent.span_id, "016x") if s.parent else None,
            "name": s.name,
            "kind": s.kind.value + 1,
            "start": s.start_time,
            "end": s.end_time,
            "status_code": s.status.status_code.value,
            "status_message": s.status.description,
            "attributes": attrs,
            "service_name": s.resource.attributes.get("service.name"),
            "resource": {k: stringify(v) for k, v in s.resource.attributes.items() if k != "service.name"},
            "scope": (s.instrumentation_scope.name, s.instrumentation_scope.version),
            "events": sorted(
                (e.timestamp, e.name, tuple(sorted((k, stringify(list(v) if isinstance(v, tuple) else v))
                                                   for k, v in (e.attributes or {}).items())))
                for e in s.events),
            "links": sorted((format(l.context.trace_id, "032x"), format(l.context.span_id, "016x"),
                             tuple(sorted((k, stringify(v)) for k, v in (l.attributes or {}).items())))
                            for l in s.links),
        }
    return out


def lake_view(lake: Path) -> dict[str, dict]:
    """Read every span back out of the lake in the shape of :func:`expected_view`.

    Promoted typed columns are folded back into the attributes under their original key.
    """
    lk = Lake(lake)
    for table in ("spans", "span_events", "span_links"):
        for f in lk.live_files(table):
            assert check_lake_file(f, table) is None
            assert pq.read_schema(f).metadata[b"otel_assay.schema_version"] == b"1"
    rows, events, links = (
        pa.concat_tables([pq.read_table(f) for f in lk.live_files(t)], promote_options="default").to_pylist()
        if lk.live_files(t) else []
        for t in ("spans", "span_events", "span_links"))
    ev: dict[str, list] = {}
    for e in events:
        ev.setdefault(e["span_id"], []).append((e["time_unix_nano"], e["name"], tuple(sorted(dict(e["attributes"]).items()))))
    ln: dict[str, list] = {}
    for l in links:
        ln.setdefault(l["span_id"], []).append((l["linked_trace_id"], l["linked_span_id"], tuple(sorted(dict(l["attributes"]).items()))))
    out = {}
    for r in rows:
        attrs = dict(r["attributes"])
        for col, key, _t in PROMOTED_SPAN_ATTRIBUTES:
            if r[col] is not None:
                assert key not in attrs, f"promoted key {key} repeated in the map"
                attrs[key] = stringify(r[col])
        assert r["span_id"] not in out, f"duplicate span {r['span_id']}"
        out[r["span_id"]] = {
            "trace_id": r["trace_id"], "parent_span_id": r["parent_span_id"], "name": r["name"],
            "kind": r["kind"], "start": r["start_time_unix_nano"],
            "end": r["start_time_unix_nano"] + r["duration_ns"], "status_code": r["status_code"],
            "status_message": r["status_message"], "attributes": attrs, "service_name": r["service_name"],
            "resource": dict(r["resource_attributes"]), "scope": (r["scope_name"], r["scope_version"]),
            "events": sorted(ev.get(r["span_id"], [])), "links": sorted(ln.get(r["span_id"], [])),
        }
    return out


READY = re.compile(r"OTLP/(gRPC|HTTP) listening on (?:https?://)?\[?([^\]\s]+?)\]?:(\d+)")


class CollectorProcess:
    """``otel-assay collect`` as a real subprocess on loopback ports chosen by the OS."""

    def __init__(self, lake: Path, *extra: str, grpc: bool = True, http: bool = True, env=None, preexec_fn=None):
        args = [sys.executable, "-m", "otel_assay", "collect", "--dir", str(lake),
                "--grpc", "127.0.0.1:0" if grpc else "off", "--http", "127.0.0.1:0" if http else "off", *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})}, preexec_fn=preexec_fn)
        self.ports: dict[str, int] = {}
        self.lines: list[str] = []
        want = int(grpc) + int(http)
        deadline = time.monotonic() + 30
        while len(self.ports) < want:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                err = self.proc.stderr.read() if self.proc.poll() is not None else ""
                self.kill()
                raise RuntimeError(f"collector did not start: {self.lines} {err}")
            line = self.proc.stdout.readline()
            self.lines.append(line)
            m = READY.search(line)
            if m:
                self.ports[m.group(1).lower()] = int(m.group(3))

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}/v1/traces"

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    def terminate(self, timeout: float = 30) -> tuple[int, str, str]:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def cpu_seconds(self) -> float:
        """User plus system CPU time the collector has used so far (/proc/PID/stat)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def collector_factory():
    started: list[CollectorProcess] = []

    def start(lake: Path, *extra: str, **kw) -> CollectorProcess:
        c = CollectorProcess(lake, *extra, **kw)
        started.append(c)
        return c

    yield start
    for c in started:
        c.kill()
