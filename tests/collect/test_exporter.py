"""ParquetSpanExporter behind the real SDK processors."""

from __future__ import annotations

import os
import threading
import time

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_assay.collect import ParquetSpanExporter
from otel_assay.lake.files import LakeError

from .conftest import agent_trial, expected_view, lake_view, make_provider, recorded_trials


@pytest.mark.parametrize("processor", ["simple", "batch"])
def test_every_span_lands_with_ids_parents_times_attributes_events(tmp_path, processor):
    exp = ParquetSpanExporter(tmp_path / "lake", max_rows=7)  # several files per run
    mem = InMemorySpanExporter()
    wrap = SimpleSpanProcessor if processor == "simple" else BatchSpanProcessor
    tp = make_provider(wrap(exp), SimpleSpanProcessor(mem))
    tracer = tp.get_tracer("tests.agent", "0.1")
    for i in range(10):
        agent_trial(tracer, index=i, fail=i % 4 == 0)
    tp.shutdown()
    spans = mem.get_finished_spans()
    assert exp.spans_received == exp.spans_written == len(spans)
    if processor == "simple":
        assert exp.files_written > 1
    assert lake_view(tmp_path / "lake") == expected_view(spans)

def test_two_providers_spans_in_one_export_keep_their_own_resource(tmp_path):
    shop = recorded_trials(2)
    billing = recorded_trials(2, service="billing-agent", resource={"host.name": "h2", "k8s.pod.name": "p-1"})
    mixed = [s for pair in zip(shop, billing) for s in pair]  # alternating, as two threads' spans end
    exp = ParquetSpanExporter(tmp_path / "lake")
    exp.export(mixed)
    exp.shutdown()
    assert lake_view(tmp_path / "lake") == expected_view(mixed)


def test_what_the_sdk_dropped_under_its_span_limits_is_counted(tmp_path):
    # the dropped counts the SDK's public properties report reach the lake, an event's own
    # too (as it reaches the lake through the receiver, from the SDK's OTLP exporter)
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider

    exp = ParquetSpanExporter(tmp_path / "lake")
    mem = InMemorySpanExporter()
    tp = TracerProvider(span_limits=SpanLimits(max_span_attributes=2, max_events=1, max_links=1,
                                               max_event_attributes=1))
    tp.add_span_processor(SimpleSpanProcessor(exp))
    tp.add_span_processor(SimpleSpanProcessor(mem))
    tracer = tp.get_tracer("limits")
    with tracer.start_as_current_span("other") as other:
        pass
    link = trace_api.Link(other.get_span_context())
    with tracer.start_as_current_span("limited", links=[link, link], attributes={
            "a": "1", "b": "2", "c": "3", "gen_ai.tool.name": "lookup"}) as span:  # the SDK keeps the newest
        for i in range(3):
            span.add_event(f"e{i}", {"x": 1, "y": 2})
    tp.shutdown()
    sdk = [s for s in mem.get_finished_spans() if s.name == "limited"][0]
    assert (sdk.dropped_attributes, sdk.dropped_events, sdk.dropped_links) == (2, 2, 1)
    import duckdb
    con = duckdb.connect()
    row = con.sql(
        f"SELECT dropped_attributes_count, dropped_events_count, dropped_links_count, tool_name "
        f"FROM read_parquet('{tmp_path}/lake/spans/*/*.parquet') WHERE name = 'limited'").fetchall()
    assert row == [(2, 2, 1, "lookup")]
    assert sdk.events[0].dropped_attributes == 1
    rows = con.sql(f"SELECT dropped_attributes_count, cardinality(attributes) "
                      f"FROM read_parquet('{tmp_path}/lake/span_events/*/*.parquet')").fetchall()
    assert rows == [(1, 1)]



def test_burst_of_100k_spans_is_not_dropped(tmp_path):
    exp = ParquetSpanExporter(tmp_path / "lake")
    tp = make_provider(BatchSpanProcessor(exp, max_queue_size=200_000, max_export_batch_size=4096))
    tracer = tp.get_tracer("burst")
    for i in range(100_000):
        with tracer.start_as_current_span("execute_tool t", attributes={"gen_ai.tool.name": "t", "i": i}):
            pass
    tp.shutdown()
    assert exp.spans_received == exp.spans_written == 100_000
    import pyarrow.parquet as pq
    from otel_assay.lake.files import Lake
    assert sum(pq.read_metadata(f).num_rows for f in Lake(tmp_path / "lake").live_files()) == 100_000


def test_age_flush_writes_without_force_flush(tmp_path):
    exp = ParquetSpanExporter(tmp_path / "lake", max_age_s=0.2)
    tp = make_provider(SimpleSpanProcessor(exp))
    with tp.get_tracer("t").start_as_current_span("x"):
        pass
    deadline = time.monotonic() + 10
    while exp.spans_written == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exp.spans_written == 1
    tp.shutdown()


def test_unwritable_lake_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(LakeError, match="cannot create lake directory .* choose a directory you can write to"):
        ParquetSpanExporter(blocker / "lake")


def test_failed_write_keeps_spans_and_retries(tmp_path):
    lake = tmp_path / "lake"
    exp = ParquetSpanExporter(lake, max_age_s=3600)
    tp = make_provider(SimpleSpanProcessor(exp))
    with tp.get_tracer("t").start_as_current_span("before"):
        pass
    spans_dir = lake / "spans"
    os.rename(spans_dir, tmp_path / "moved")
    spans_dir.write_text("a file where the spans directory should be")  # every write now fails
    assert exp.force_flush() is False
    assert exp.spans_written == 0 and exp.last_error
    spans_dir.unlink()
    os.rename(tmp_path / "moved", spans_dir)
    assert exp.force_flush() is True
    assert exp.spans_written == 1
    tp.shutdown()


def test_spans_exported_while_a_write_fails_are_kept_for_the_retry(tmp_path):
    """A flush whose write failed put its rows back and wrote the spans exported meanwhile
    at once; on a full disk that write failed too and those spans were dropped (counted in
    spans_lost, not logged), though the exporter promises to keep them until shutdown."""
    lake = tmp_path / "lake"
    exp = ParquetSpanExporter(lake, max_age_s=3600)
    tp = make_provider(SimpleSpanProcessor(exp))
    tracer = tp.get_tracer("t")
    spans_dir = lake / "spans"
    os.rename(spans_dir, tmp_path / "moved")
    spans_dir.write_text("a file where the spans directory should be")  # every write now fails
    stop = threading.Event()

    def agent_runs():
        i = 0
        while not stop.is_set():
            agent_trial(tracer, index=i)
            i += 1
            # an agent's pace, not a tight loop: flat out, the faster the exporter converts, the
            # more spans arrive while the lake is unwritable, past max_unwritten_spans (500,000),
            # and dropping the oldest is then what the exporter must do
            time.sleep(0.001)

    worker = threading.Thread(target=agent_runs)
    worker.start()
    try:
        for _ in range(10):  # failing flushes while spans keep arriving
            time.sleep(0.05)
            assert exp.force_flush() is False
    finally:
        stop.set()
        worker.join()
    spans_dir.unlink()
    os.rename(tmp_path / "moved", spans_dir)
    assert exp.force_flush() is True
    tp.shutdown()
    assert exp.spans_lost == 0
    assert exp.spans_written == exp.spans_received > 0
    assert len(lake_view(lake)) == exp.spans_received


def test_hand_built_readable_spans_with_plain_dict_attributes(tmp_path):
    """The exporter reads the SDK's attribute dicts directly when it can; spans built by other
    code (a ReadableSpan with plain dicts, a still-mutable attribute mapping) take the public
    path and land the same."""
    from opentelemetry.attributes import BoundedAttributes
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags

    ctx = SpanContext(0xABC, 0x12, is_remote=False, trace_flags=TraceFlags(1))
    other = SpanContext(0xDEF, 0x34, is_remote=False, trace_flags=TraceFlags(1))
    common = {"resource": Resource.create({"service.name": "hand-built"}),
              "instrumentation_scope": InstrumentationScope("tests.hand", "1")}
    mutable = BoundedAttributes(attributes={"gen_ai.tool.name": "lookup", "n": 3}, immutable=False)
    spans = [
        ReadableSpan("plain", context=ctx, kind=SpanKind.CLIENT, start_time=10, end_time=20,
                     attributes={"gen_ai.operation.name": "chat", "k": "v", "flag": True},
                     events=[Event("e", {"x": 1.5}, timestamp=15)], links=[Link(other, {"why": "retry"})], **common),
        ReadableSpan("mutable", context=SpanContext(0xABC, 0x13, is_remote=False), parent=ctx,
                     start_time=11, end_time=19, attributes=mutable, **common),
    ]
    invalid = ReadableSpan("no trace", context=SpanContext(0, 0x14, is_remote=False), start_time=1, end_time=2, **common)
    exp = ParquetSpanExporter(tmp_path / "lake")
    exp.export([*spans, invalid])
    exp.shutdown()
    assert lake_view(tmp_path / "lake") == expected_view(spans)
    assert (exp.spans_received, exp.spans_written, exp.spans_rejected) == (3, 2, 1)



def test_spans_of_traces_taking_turns_and_arrays_land_as_sent(tmp_path):
    """The exporter formats a trace's id once for the spans of that trace that come in a row,
    and encodes an array of strings without converting it first: spans of two traces taking
    turns keep their own ids, and every array is the compact JSON of its value."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext

    from otel_assay.lake.files import Lake

    arrays = {"strings": ("stop", "é", 'q"uote', "\\n"), "empty": (), "ints": (1, 2), "bools": (True, False),
              "floats": (1.5, float("nan")), "mixed": ("a", 1)}
    res = Resource.create({})
    spans = [ReadableSpan(f"s{i}", context=SpanContext(0xA if i % 2 else 0xB, 0x10 + i, is_remote=False),
                          attributes=arrays, start_time=10, end_time=20, resource=res) for i in range(6)]
    exp = ParquetSpanExporter(tmp_path / "lake")
    exp.export(spans[:3])
    exp.export(spans[3:])
    exp.shutdown()
    rows = pa.concat_tables([pq.read_table(f) for f in Lake(tmp_path / "lake").live_files()]).to_pylist()
    assert sorted((r["name"], r["trace_id"]) for r in rows) == [
        (f"s{i}", format(0xA if i % 2 else 0xB, "032x")) for i in range(6)]
    reference = {k: json.dumps([x if x == x else "nan" for x in v], separators=(",", ":"), ensure_ascii=False)
                 for k, v in arrays.items()}
    assert all(dict(r["attributes"]) == reference for r in rows)


def test_a_hand_built_span_the_sdk_would_not_allow_does_not_corrupt_its_neighbours(tmp_path):
    """A ReadableSpan built by other code can hold a set or an unknown kind: the set failed
    stringify after the span's first attributes were appended (they became the next span's,
    and export() raised, losing its batch); an unknown kind failed after everything else."""
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.parquet as pq
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import Link, SpanContext

    from otel_assay.lake.files import Lake

    res = Resource.create({})

    def span(sid, attrs, **kw):
        return ReadableSpan(f"s{sid}", context=SpanContext(1, sid, is_remote=False), attributes=attrs,
                            events=[Event(f"e{sid}", {"n": sid}, timestamp=15)], start_time=10, end_time=20,
                            resource=res, **kw)

    exp = ParquetSpanExporter(tmp_path / "lake")
    exp.export([span(1, {"first": 1, "odd": {1}, "dec": Decimal("1.5")}),
                span(2, {"b": "2"}, kind="not a kind", links=[Link(SpanContext(1, 1, is_remote=False), {"l": 1})]),
                span(3, {"c": "3"})])
    exp.shutdown()
    assert (exp.spans_received, exp.spans_written, exp.spans_rejected) == (3, 2, 1)
    lake = Lake(tmp_path / "lake")
    spans = pa.concat_tables([pq.read_table(f) for f in lake.live_files()]).sort_by("span_id").to_pylist()
    assert [(s["name"], dict(s["attributes"])) for s in spans] == [
        ("s1", {"first": "1", "odd": "{1}", "dec": "1.5"}), ("s3", {"c": "3"})]
    events = pa.concat_tables([pq.read_table(f) for f in lake.live_files("span_events")]).sort_by("span_id")
    assert events.column("name").to_pylist() == ["e1", "e3"]
    assert not lake.live_files("span_links")


@pytest.mark.parametrize("configured", ["argument", "environment"])
def test_spans_waiting_for_a_lake_that_stays_unwritable_are_bounded_oldest_dropped(tmp_path, monkeypatch, caplog,
                                                                                   configured):
    """Every failed flush was kept for the retry: with the lake unwritable for long the
    application's memory grew without bound."""
    import logging

    lake = tmp_path / "lake"
    if configured == "environment":
        monkeypatch.setenv("OTEL_ASSAY_MAX_UNWRITTEN_SPANS", "50")
        exp = ParquetSpanExporter(lake, max_rows=10, max_age_s=3600)
    else:
        exp = ParquetSpanExporter(lake, max_rows=10, max_age_s=3600, max_unwritten_spans=50)
    tp = make_provider(BatchSpanProcessor(exp, max_export_batch_size=10, schedule_delay_millis=60_000))
    tracer = tp.get_tracer("t")
    spans_dir = lake / "spans"

    def outage():
        os.rename(spans_dir, tmp_path / "moved")
        spans_dir.write_text("a file where the spans directory should be")  # every write fails, even as root

    def recover():
        spans_dir.unlink()
        os.rename(tmp_path / "moved", spans_dir)

    caplog.set_level(logging.WARNING, logger="otel_assay.collect")
    outage()
    for i in range(300):
        with tracer.start_as_current_span(f"step {i}"):
            pass
        if i % 10 == 9:
            tp.force_flush()
            exp.force_flush()
            assert sum(n for _t, n in exp._unwritten) <= 50
    assert [r.getMessage().count("oldest are being dropped") for r in caplog.records].count(1) == 1  # once
    assert exp.spans_lost == 250
    recover()
    assert exp.force_flush() is True
    assert exp.spans_written == 50 and exp.spans_written + exp.spans_lost == exp.spans_received == 300
    assert sorted(s["name"] for s in lake_view(lake).values()) == sorted(f"step {i}" for i in range(250, 300))
    # a second outage warns again
    outage()
    for i in range(70):
        with tracer.start_as_current_span(f"later {i}"):
            pass
    tp.force_flush()
    exp.force_flush()
    recover()
    tp.shutdown()
    assert [r.getMessage().count("oldest are being dropped") for r in caplog.records].count(1) == 2
    assert exp.spans_written + exp.spans_lost == exp.spans_received == 370


def test_a_span_without_a_context_is_rejected_and_the_age_flusher_goes_on(tmp_path):
    """export() holds spans and converts them later (on the age flusher's thread here): a
    hand-built span that cannot be read at all raised there, which killed the flusher and
    silently dropped the spans held after it; nothing was written by age again."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext

    res = Resource.create({})

    def good(i):
        return ReadableSpan(f"s{i}", context=SpanContext(7, 0x10 + i, is_remote=False), start_time=10, end_time=20,
                            resource=res)

    def wait_for(written):
        deadline = time.monotonic() + 20
        while exp.spans_written < written and time.monotonic() < deadline:
            time.sleep(0.02)
        return exp.spans_written

    exp = ParquetSpanExporter(tmp_path / "lake", max_age_s=0.2)
    for i in range(5):
        exp.export([good(i)])
    assert exp.export([ReadableSpan("no context", start_time=10, end_time=20, resource=res)]).name == "SUCCESS"
    for i in range(5, 10):
        exp.export([good(i)])
    assert wait_for(10) == 10  # written by age, around the bad span
    assert exp.spans_rejected == 1 and exp._timer.is_alive()
    # a flush of held spans that were all rejected leaves nothing waiting: the next span's
    # age counts from its own export, not from theirs (it was written at the next tick)
    exp.max_age_s = 60
    exp.export([ReadableSpan("no context", start_time=10, end_time=20, resource=res)])
    exp.force_flush()
    before = time.monotonic()
    exp.export([good(10)])
    assert exp._oldest >= before
    exp.shutdown()
    assert (exp.spans_received, exp.spans_written, exp.spans_rejected, exp.spans_lost) == (13, 11, 2, 0)


def test_every_span_export_accepted_during_a_shutdown_is_written(tmp_path):
    """Threads keep exporting while another shuts the exporter down: a span accepted after
    the last flush had taken the buffer, before shutdown was marked, was acknowledged
    (SUCCESS) and never written nor counted lost."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext

    res = Resource.create({})
    for attempt in range(5):
        exp = ParquetSpanExporter(tmp_path / f"lake{attempt}")
        accepted = [0] * 4

        def send(t, exp=exp, accepted=accepted):
            i = 0
            while True:
                i += 1
                span = ReadableSpan("s", context=SpanContext(t + 1, i, is_remote=False), start_time=10, end_time=20,
                                    resource=res)
                if exp.export([span]).name != "SUCCESS":
                    return
                accepted[t] += 1

        threads = [threading.Thread(target=send, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        time.sleep(0.05 * (attempt + 1))
        exp.shutdown()
        for th in threads:
            th.join()
        assert sum(accepted) == exp.spans_received == exp.spans_written and exp.spans_lost == 0


def test_an_interrupt_while_converting_keeps_the_spans_before_it_and_counts_the_rest_lost(tmp_path):
    """Ctrl-C lands in the text of a span's value: that span's rows are taken back (they
    must not become the next span's), the spans before it are written, and the ones it did
    not reach are counted lost: every span received is written, rejected or lost."""
    import pyarrow.parquet as pq
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext

    from otel_assay.lake.files import Lake

    class Interrupting:
        def __str__(self):
            raise KeyboardInterrupt

    res = Resource.create({})

    def span(sid, attrs):
        return ReadableSpan(f"s{sid}", context=SpanContext(1, sid, is_remote=False), attributes=attrs,
                            start_time=10, end_time=20, resource=res)

    exp = ParquetSpanExporter(tmp_path / "lake")
    with pytest.raises(KeyboardInterrupt):
        exp.export([span(1, {"a": "1"}), span(2, {"b": "2", "odd": Interrupting()}), span(3, {"c": "3"})])
    exp.export([span(4, {"d": "4"})])
    exp.shutdown()
    assert (exp.spans_received, exp.spans_written, exp.spans_rejected, exp.spans_lost) == (4, 2, 0, 2)
    rows = sorted((r["span_id"], r["attributes"]) for f in Lake(tmp_path / "lake").live_files()
                  for r in pq.read_table(f, columns=["span_id", "attributes"]).to_pylist())
    assert rows == [(f"{1:016x}", [("a", "1")]), (f"{4:016x}", [("d", "4")])]
