"""Traffic, probes and accounting for the fault-injection tests.

Clients are the official OTLP exporters (HTTP and gRPC), fed spans that a real SDK
``TracerProvider`` produced; a prober asks ``GET /health`` ten times a second; the ledger
records every export call with its outcome. A span counts as acknowledged exactly when
``exporter.export()`` returned ``SpanExportResult.SUCCESS`` for its batch, which is what an
application relies on when it drops a batch from its queue.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pyarrow.parquet as pq
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_assay.lake.files import Lake
from tests.collect.conftest import CollectorProcess, agent_trial, make_provider

# The collector flushes its log to Parquet this often: short, so that every fault meets
# the flusher many times (seal, open a segment, write Parquet, delete the segment).
FLUSH_SECONDS = "0.2"
# One export call gives up after this long, retries included (the exporters' own backoff
# honours Retry-After): long enough to ride out a 1 s Retry-After, short enough that the
# client threads stop promptly at the end of a test.
EXPORT_TIMEOUT_S = 3.0
HEALTH_EVERY_S = 0.1
# SIGTERM must end the collector within 20 s (it documents that bound, for supervisors that
# wait for the exit before starting the next one), plus a moment for the process to exit.
SIGTERM_BOUND_S = 22.0

Key = tuple[str, str]  # (trace_id, span_id) in lowercase hex, as the lake stores them


def span_keys(spans) -> tuple[Key, ...]:
    return tuple((format(s.context.trace_id, "032x"), format(s.context.span_id, "016x")) for s in spans)


class Target:
    """The collector under test, on one lake; after a SIGKILL it is started again on the
    same lake (on new ports, which the clients pick up by the generation number).

    Its stdout and stderr are read all the time: a collector logging an error at every
    flush would otherwise fill the pipe and block in its logging, a hang the test made.
    """

    def __init__(self, lake: Path, *extra: str):
        self.lake = lake
        self.extra = ("--flush-seconds", FLUSH_SECONDS, *extra)
        self._lock = threading.Lock()
        self.collector: CollectorProcess | None = None
        self.generation = 0
        self.output: list[str] = []  # every line the collectors printed, stdout and stderr
        self._readers: list[threading.Thread] = []
        self.start()

    def start(self) -> float:
        """Start a collector; return the time it was ready to take requests."""
        c = CollectorProcess(self.lake, *self.extra)
        self.output.extend(c.lines)
        for stream in (c.proc.stdout, c.proc.stderr):
            t = threading.Thread(target=self._drain, args=(stream,), daemon=True)
            t.start()
            self._readers.append(t)
        with self._lock:
            self.collector = c
            self.generation += 1
        return time.monotonic()

    def _drain(self, stream) -> None:
        for line in stream:
            self.output.append(line)

    def current(self) -> tuple[int, CollectorProcess | None]:
        with self._lock:
            return self.generation, self.collector

    def alive(self) -> bool:
        _g, c = self.current()
        return c is not None and c.proc.poll() is None

    def sigkill(self) -> None:
        with self._lock:
            c, self.collector = self.collector, None
        c.kill()

    def sigterm(self) -> tuple[int | None, float]:
        """SIGTERM and wait; (exit code or None when it did not exit in time, seconds taken)."""
        with self._lock:
            c, self.collector = self.collector, None
        t0 = time.monotonic()
        c.proc.terminate()
        try:
            code = c.proc.wait(timeout=SIGTERM_BOUND_S)
        except subprocess.TimeoutExpired:
            c.kill()
            code = None
        took = time.monotonic() - t0
        for t in self._readers:
            t.join(timeout=5)
        return code, took

    def close(self) -> None:
        """Kill whatever still runs (a test that failed half-way)."""
        with self._lock:
            c, self.collector = self.collector, None
        if c is not None:
            c.kill()

    def tracebacks(self) -> list[str]:
        """Each traceback the collectors printed, as its last frame and its exception line."""
        out = []
        for chunk in "".join(self.output).split("Traceback (most recent call last):")[1:]:
            lines = chunk.strip("\n").splitlines()
            end = next((i for i, line in enumerate(lines) if line and not line[0].isspace()), len(lines) - 1)
            frames = [i for i, line in enumerate(lines[:end]) if line.lstrip().startswith("File ")]
            last = lines[frames[-1]].strip() if frames else ""
            out.append(f"{last}: {lines[end].strip()}" if lines else "")
        return out


@dataclass(frozen=True)
class Export:
    kind: str           # "http" or "grpc" (an exporter), "direct" (a batch sent without one)
    start: float        # time.monotonic() when export() was called
    end: float          # ... and when it returned
    ok: bool            # SpanExportResult.SUCCESS
    keys: tuple[Key, ...]
    generation: int     # which collector process it was sent to
    error: str = ""


@dataclass
class Ledger:
    """Every export call, in the order they returned."""

    exports: list[Export] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, e: Export) -> None:
        with self.lock:
            self.exports.append(e)

    def snapshot(self) -> list[Export]:
        with self.lock:
            return list(self.exports)

    def acknowledged(self, *, started_after: float = float("-inf")) -> set[Key]:
        return {k for e in self.snapshot() if e.ok and e.start >= started_after for k in e.keys}

    def acknowledged_count(self, kind: str | None = None) -> int:
        return sum(len(e.keys) for e in self.snapshot() if e.ok and kind in (None, e.kind))

    def first_success(self, kind: str, after: float) -> Export | None:
        return next((e for e in self.snapshot() if e.ok and e.kind == kind and e.end > after), None)

    def calls(self, kind: str, *, started_after: float, until: float = float("inf")) -> list[Export]:
        return [e for e in self.snapshot() if e.kind == kind and started_after <= e.start <= until]


class Client(threading.Thread):
    """One application: makes agent trials with a real SDK and exports each batch of spans
    with the official exporter of its protocol. A batch that was not acknowledged is sent
    again (as a durable queue would) until it is, so retransmissions after an
    unacknowledged but stored attempt are part of the traffic."""

    def __init__(self, kind: str, target: Target, ledger: Ledger, stop: threading.Event, *,
                 trials_per_batch: int = 3, pause: float = 0.02):
        super().__init__(name=f"fault-client-{kind}", daemon=True)
        self.kind, self.target, self.ledger, self.stop = kind, target, ledger, stop
        self.trials_per_batch, self.pause = trials_per_batch, pause

    def _exporter(self, c: CollectorProcess):
        if self.kind == "http":
            return HttpExporter(endpoint=c.http_url, timeout=EXPORT_TIMEOUT_S)
        return GrpcExporter(endpoint=c.grpc_endpoint, insecure=True, timeout=EXPORT_TIMEOUT_S)

    def run(self) -> None:
        mem = InMemorySpanExporter()
        provider = make_provider(SimpleSpanProcessor(mem), service=f"fault-{self.kind}")
        tracer = provider.get_tracer("tests.faults", "0.1")
        exporter, generation, batch, trial = None, 0, None, 0
        try:
            while not self.stop.is_set():
                g, c = self.target.current()
                if c is None:  # killed, not started again yet
                    self.stop.wait(0.05)
                    continue
                if g != generation:
                    if exporter is not None:
                        exporter.shutdown()
                    exporter, generation = self._exporter(c), g
                if batch is None:
                    for _ in range(self.trials_per_batch):
                        agent_trial(tracer, index=trial, fail=trial % 5 == 4)
                        trial += 1
                    batch = mem.get_finished_spans()
                    mem.clear()
                start = time.monotonic()
                error = ""
                try:
                    ok = exporter.export(batch) is SpanExportResult.SUCCESS
                except Exception as e:  # noqa: BLE001 - an exporter that raises did not acknowledge
                    ok, error = False, f"{type(e).__name__}: {e}"
                self.ledger.record(Export(self.kind, start, time.monotonic(), ok, span_keys(batch), g, error))
                if ok:
                    batch = None
                self.stop.wait(self.pause)
        finally:
            if exporter is not None:
                exporter.shutdown()
            provider.shutdown()


@dataclass(frozen=True)
class Health:
    t: float
    status: int  # -1: no answer (refused, reset, timed out)
    body: str


class HealthProbe(threading.Thread):
    """``GET /health`` on the current collector every ``HEALTH_EVERY_S``, on one kept-alive
    connection (as a load balancer keeps one): a collector out of file descriptors cannot
    accept a new connection, but must still answer on the ones it has."""

    def __init__(self, target: Target, stop: threading.Event):
        super().__init__(name="fault-health-probe", daemon=True)
        self.target, self.stop = target, stop
        self.samples: list[Health] = []

    def run(self) -> None:
        conn, port = None, None
        try:
            while not self.stop.is_set():
                _g, c = self.target.current()
                if c is not None:
                    if port != c.ports["http"] and conn is not None:
                        conn.close()
                        conn = None
                    port = c.ports["http"]
                    if conn is None:
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
                    try:
                        conn.request("GET", "/health")
                        r = conn.getresponse()
                        self.samples.append(Health(time.monotonic(), r.status, r.read().decode(errors="replace")))
                    except (http.client.HTTPException, OSError):
                        self.samples.append(Health(time.monotonic(), -1, ""))
                        conn.close()
                        conn = None
                self.stop.wait(HEALTH_EVERY_S)
        finally:
            if conn is not None:
                conn.close()

    def between(self, start: float, end: float = float("inf")) -> list[Health]:
        return [h for h in list(self.samples) if start <= h.t <= end]

    def first_ok(self, after: float) -> Health | None:
        return next((h for h in list(self.samples) if h.t > after and h.status == 200), None)


def cause(body: str) -> str:
    """What a /health answer says went wrong (its ``cause``; "" when it says nothing)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return ""
    found = doc.get("cause") if isinstance(doc, dict) else None
    return found.strip() if isinstance(found, str) else ""


def stored_keys(lake: Path) -> list[Key]:
    """(trace_id, span_id) of every span row in the lake's live Parquet files, repeats kept."""
    keys: list[Key] = []
    for f in Lake(lake).live_files("spans"):
        t = pq.read_table(f, columns=["trace_id", "span_id"])
        keys.extend(zip(t.column("trace_id").to_pylist(), t.column("span_id").to_pylist()))
    return keys


@dataclass(frozen=True)
class Answer:
    status: str         # "200", "503", "UNAVAILABLE", ...
    retry_hint: bool    # Retry-After (HTTP) or RetryInfo (gRPC) came with it
    detail: str


def send_directly(kind: str, c: CollectorProcess, body: bytes) -> Answer:
    """Send one OTLP request without an exporter in between, to see the collector's own
    answer (an exporter retries it and reports only success or failure)."""
    if kind == "http":
        req = urllib.request.Request(c.http_url, data=body, method="POST",
                                     headers={"Content-Type": "application/x-protobuf"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return Answer(str(r.status), False, "")
        except urllib.error.HTTPError as e:
            return Answer(str(e.code), e.headers.get("Retry-After") is not None, e.read()[:300].decode(errors="replace"))
        except (urllib.error.URLError, OSError) as e:
            return Answer("no answer", False, str(e))
    with grpc.insecure_channel(c.grpc_endpoint) as channel:
        stub = TraceServiceStub(channel)
        try:
            stub.Export(ExportTraceServiceRequest.FromString(body), timeout=5)
            return Answer("OK", False, "")
        except grpc.RpcError as e:
            trailers = dict(e.trailing_metadata() or ())
            hint = "grpc-status-details-bin" in trailers or "google.rpc.retryinfo-bin" in trailers
            return Answer(e.code().name, hint, e.details() or "")
