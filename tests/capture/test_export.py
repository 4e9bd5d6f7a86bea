"""How capture exports: the SDK's BatchSpanProcessor around the lake writer, so a span's
conversion to rows runs on the processor's thread, not on the thread that ends the span;
flush() makes every ended span durable; a span the queue drops is reported as a gap, never
silently; use_lake() switches the lake between trials. A real SDK provider of each test's
own, a real ParquetSpanExporter and a real lake read back with DuckDB."""

import logging
import threading
import time

import duckdb
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_assay.capture import _runtime
from otel_assay.collect.exporter import ParquetSpanExporter


class Watched(ParquetSpanExporter):
    """The lake writer, noting the threads that hand it spans, and able to hold its first
    export until ``gate`` is set (a slow disk)."""

    def __init__(self, directory, gate=None):
        super().__init__(directory)
        self.threads: list[int] = []
        self.entered = threading.Event()
        self.gate = gate

    def export(self, spans):
        self.threads.append(threading.get_ident())
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
            self.gate = None
        return super().export(spans)


def _pipeline(monkeypatch, exporter):
    """Our pipeline, as _install builds it for a lake, on a provider of its own."""
    provider = TracerProvider()
    attrs = _runtime.AssayAttributesProcessor()
    lake = _runtime.LakeExporter(exporter)
    processor = _runtime.batch_processor(lake)
    provider.add_span_processor(attrs)
    provider.add_span_processor(processor)
    pipe = _runtime.Pipeline(provider, True, exporter, processor, attrs, "parquet", str(exporter.lake.root), lake)
    monkeypatch.setattr(_runtime, "_PIPELINE", pipe)
    return pipe


def _rows(directory) -> int:
    with duckdb.connect() as con:  # held: older DuckDB closes an unreferenced connection under its relation
        return con.sql(f"select count(*) from read_parquet('{directory}/**/*.parquet')").fetchall()[0][0]


def _wait(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_spans_are_converted_off_the_thread_that_ends_them(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    exporter = Watched(tmp_path / "lake")
    pipe = _pipeline(monkeypatch, exporter)
    tracer = pipe.tracer("t")
    for i in range(50):
        tracer.start_span(f"s{i}", attributes={"i": i}).end()
    _wait(lambda: exporter.spans_received == 50)
    assert exporter.threads and threading.get_ident() not in exporter.threads
    assert _runtime.flush(10)
    assert _rows(tmp_path / "lake") == 50
    assert _runtime.stats()["spans_produced"] == _runtime.stats()["spans_written"] == 50


def test_flush_makes_every_ended_span_durable(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # the worker never runs on its own
    pipe = _pipeline(monkeypatch, ParquetSpanExporter(tmp_path / "lake"))
    tracer = pipe.tracer("t")
    for i in range(1000):
        tracer.start_span("s", attributes={"i": i}).end()
    assert _runtime.flush(10)
    assert _rows(tmp_path / "lake") == 1000


def test_a_burst_beyond_the_queue_is_reported_as_a_gap(tmp_path, monkeypatch, caplog):
    """OTEL_BSP_MAX_QUEUE_SIZE is respected; the spans the full queue drops while the writer
    is stuck are counted as produced and not written, and flush says so."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    gate = threading.Event()
    exporter = Watched(tmp_path / "lake", gate)
    pipe = _pipeline(monkeypatch, exporter)
    tracer = pipe.tracer("t")
    tracer.start_span("first").end()
    assert exporter.entered.wait(10)  # the worker holds the first span, stuck in export
    for i in range(20):
        tracer.start_span("burst", attributes={"i": i}).end()
    gate.set()
    with caplog.at_level(logging.WARNING, logger="otel_assay.capture"):
        assert _runtime.flush(10) is False
    s = _runtime.stats()
    assert s["spans_produced"] == 21
    assert s["spans_written"] == _rows(tmp_path / "lake") == 5  # the first and a full queue
    assert "16 spans produced but not written" in caplog.text


def test_use_lake_sends_later_spans_to_the_new_lake(tmp_path, monkeypatch):
    pipe = _pipeline(monkeypatch, ParquetSpanExporter(tmp_path / "a"))
    tracer = pipe.tracer("t")
    for _ in range(3):
        tracer.start_span("baseline").end()
    _runtime.use_lake(tmp_path / "b")
    for _ in range(4):
        tracer.start_span("candidate").end()
    assert _runtime.flush(10)
    assert _rows(tmp_path / "a") == 3 and _rows(tmp_path / "b") == 4
    assert _runtime.stats()["spans_written"] == _runtime.stats()["spans_produced"] == 7


@pytest.mark.parametrize(("env", "queue", "batch", "delay"), [
    ({}, 262144, 4096, 1000),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "100"}, 100, 100, 1000),
    ({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "64", "OTEL_BSP_SCHEDULE_DELAY": "50"}, 262144, 64, 50),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "lots"}, 262144, 4096, 1000),
])
def test_the_queue_is_sized_for_bursts_unless_the_environment_says_otherwise(env, queue, batch, delay, monkeypatch):
    seen = {}

    class Spy(_runtime.BatchSpanProcessor):
        def __init__(self, exporter, **kw):
            seen.update(kw)
            super().__init__(exporter, **kw)

    monkeypatch.setattr(_runtime, "BatchSpanProcessor", Spy)
    for k in ("OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_SCHEDULE_DELAY"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _runtime.batch_processor(InMemorySpanExporter()).shutdown()
    assert seen == {"max_queue_size": queue, "max_export_batch_size": batch, "schedule_delay_millis": delay}
