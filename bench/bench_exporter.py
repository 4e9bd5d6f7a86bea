"""In-process ParquetSpanExporter cost per span and burst behaviour; prints one JSON line.

Measures (a) a bare OTel SDK span with agent-like attributes (no processor), (b) the same
span with BatchSpanProcessor + ParquetSpanExporter, end to end until the Parquet files are
written (force_flush), and (c) a burst of 100,000 spans: produced vs written.

(b) minus (a) is what a user pays; it includes the SDK's BatchSpanProcessor, which any
exporter needs. So the SDK's processor with an exporter that discards every batch is
measured too (`bsp_discarding_*`), and the difference from it is the exporter's own cost
(`exporter_own_cpu_us_per_span`: converting to Arrow, encoding and writing Parquet).
The conversion alone (`convert_cpu_us_per_span`: finished SDK spans read through their
public properties into the row builder, then into Arrow tables) is timed on its own.

The added cost is given in CPU time of the process (all threads: the exporter works on the
BatchSpanProcessor's thread, which on an idle second core hides from wall time but is
still paid) and in wall time. (a) and (b) take turns, best of --repeat each. What the agent
itself waits for is the CPU time of the thread that ends the spans
(`agent_thread_added_cpu_us_per_span`: (b) minus (a) on that thread alone, the processor's
queueing; the conversion to rows runs on the processor's worker thread).

    python bench/bench_exporter.py [--spans 100000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import pyarrow.parquet as pq
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_assay.collect import ParquetSpanExporter
from otel_assay.collect.exporter import sdk_span_record
from otel_assay.lake import Lake, SpanBatch
from otel_assay.lake.rows import make_resource

ATTRS = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_orders",
         "gen_ai.tool.call.id": "call_abc123", "gen_ai.tool.call.arguments": '{"order_id": 1234}',
         "assay.scenario": "refund", "assay.agent.version": "v2", "assay.run.id": "ci-42", "assay.trial.index": 7}


def spans(tracer, n: int) -> None:
    for i in range(n):
        with tracer.start_as_current_span("execute_tool search_orders", attributes=ATTRS):
            pass


class _Discarding(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


class _Keeping(SpanExporter):
    def __init__(self):
        self.spans = []

    def export(self, spans):
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def convert_cpu_per_span(n: int, repeat: int) -> float:
    """CPU seconds per span to turn finished SDK spans into the lake's Arrow tables."""
    keep = _Keeping()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(keep))
    spans(tp.get_tracer("bench"), n)
    resource = make_resource(keep.spans[0].resource.attributes.items())
    best = float("inf")
    for _ in range(repeat):
        c = time.process_time()
        batch = SpanBatch()
        for span in keep.spans:
            batch.add_span(**sdk_span_record(span, resource))
        rows = batch.tables()["spans"].num_rows
        best = min(best, time.process_time() - c)
        assert rows == n, (rows, n)
    return best / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = args.spans

    def bare() -> tuple[float, float, float]:
        tp = TracerProvider()
        t, c, a = time.perf_counter(), time.process_time(), time.thread_time()
        spans(tp.get_tracer("bench"), n)
        return (time.perf_counter() - t) / n, (time.process_time() - c) / n, (time.thread_time() - a) / n

    results = {}

    def with_bsp(exp) -> tuple[float, float, float]:
        tp = TracerProvider()
        tp.add_span_processor(BatchSpanProcessor(exp, max_queue_size=n * 2, max_export_batch_size=4096,
                                                 schedule_delay_millis=100))
        t, c, a = time.perf_counter(), time.process_time(), time.thread_time()
        spans(tp.get_tracer("bench"), n)
        agent = (time.thread_time() - a) / n  # the producing thread, before the flush's export
        tp.force_flush()
        el = (time.perf_counter() - t) / n, (time.process_time() - c) / n, agent
        tp.shutdown()
        return el

    def discarding() -> tuple[float, float, float]:
        return with_bsp(_Discarding())

    def with_exporter() -> tuple[float, float, float]:
        with tempfile.TemporaryDirectory() as d:
            exp = ParquetSpanExporter(d, max_rows=50_000)
            el = with_bsp(exp)
            written = sum(pq.read_metadata(f).num_rows for f in Lake(d).live_files())
            size = sum(f.stat().st_size for f in Lake(d).live_files())
            results.update(produced=n, received=exp.spans_received, written=written,
                           bytes_per_span=round(size / max(written, 1), 1))
            return el

    runs_b, runs_d, runs_e = [], [], []
    for _ in range(args.repeat):
        runs_b.append(bare())
        runs_d.append(discarding())
        runs_e.append(with_exporter())
    b_wall, b_cpu = min(r[0] for r in runs_b), min(r[1] for r in runs_b)
    d_cpu = min(r[1] for r in runs_d)
    e_wall, e_cpu = min(r[0] for r in runs_e), min(r[1] for r in runs_e)
    convert = convert_cpu_per_span(n, args.repeat)
    b_agent, e_agent = min(r[2] for r in runs_b), min(r[2] for r in runs_e)
    print(json.dumps({
        "bench": "inprocess_exporter",
        "spans": n,
        "bare_sdk_span_cpu_us": round(b_cpu * 1e6, 2),
        "with_parquet_exporter_cpu_us": round(e_cpu * 1e6, 2),
        "added_cpu_us_per_span": round((e_cpu - b_cpu) * 1e6, 2),
        "added_wall_us_per_span": round((e_wall - b_wall) * 1e6, 2),
        "target_added_us": 30,
        "bsp_discarding_added_cpu_us_per_span": round((d_cpu - b_cpu) * 1e6, 2),
        "exporter_own_cpu_us_per_span": round((e_cpu - d_cpu) * 1e6, 2),
        "convert_cpu_us_per_span": round(convert * 1e6, 2),
        "agent_thread_added_cpu_us_per_span": round((e_agent - b_agent) * 1e6, 2),
        "target_agent_thread_added_us_max": 5,
        "burst_produced": results["produced"],
        "burst_written": results["written"],
        "burst_dropped": results["produced"] - results["written"],
        "bytes_per_span_on_disk": results["bytes_per_span"],
    }))


if __name__ == "__main__":
    main()
