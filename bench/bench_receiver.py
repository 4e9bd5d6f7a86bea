"""OTLP/HTTP protobuf receiver throughput, durable, end to end; prints one JSON line.

The collector runs as a real `otel-assay collect` process pinned to one core (taskset);
client threads in this process (pinned to the other core) POST pre-encoded synthetic agent
traces over keep-alive connections. The clock runs from the first request until every span
is in Parquet (received -> fsynced in the WAL -> acknowledged -> flushed to Parquet).

That burst figure includes the last spans' wait for the flush timer (--flush-seconds, 2 s),
a latency setting rather than a cost. The sustained rate (`spans_per_s_sustained`) is the
slope of spans reaching Parquet between the first and the last flush while the clients
send; it needs at least two flushes of 200,000 spans during the run (the default 1,000,000
spans gives five).

    python bench/bench_receiver.py [--spans 1000000] [--clients 4] [--no-fsync] [--resource-attributes 10]
    python bench/bench_receiver.py --events-every 10     # an exception event on every 10th span
    python bench/bench_receiver.py --overload      # memory under sustained overload
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

from otel_assay.collect import synthetic
from otel_assay.lake.files import Lake


def proc_stat(pid: int) -> tuple[float, float]:
    """(cpu seconds, peak RSS MiB) of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    hwm = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return cpu, hwm


def start_collector(lake: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, "-m", "otel_assay", "collect", "--dir", str(lake), "--grpc", "off",
           "--http", "127.0.0.1:0", *extra]
    if os.cpu_count() and os.cpu_count() > 1:
        cmd = ["taskset", "-c", "0"] + cmd
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("collector failed to start")
        m = re.search(r"OTLP/HTTP listening on http://127.0.0.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))


class ParquetWatch:
    """Samples (time, spans in Parquet) while the clients send: flushes land as steps, and the
    slope between the first and the last step before the final drain is the sustained rate,
    free of the start-up and of the last spans' wait for the flush timer."""

    def __init__(self, lake: Path):
        self.lake, self.samples, self._sizes = lake, [], {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rows(self) -> int:
        for f in Lake(self.lake).live_files("spans"):
            if f not in self._sizes:
                try:
                    self._sizes[f] = pq.read_metadata(f).num_rows
                except OSError:
                    pass
        return sum(self._sizes.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), self._rows()))
            time.sleep(0.02)

    def start(self) -> None:
        self._thread.start()

    def wait_for(self, rows: int) -> float:
        """The time of the first sample that saw ``rows`` spans in Parquet."""
        while True:
            if self.samples and self.samples[-1][1] >= rows:
                return self.samples[-1][0]
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def sustained(self, until: float) -> float | None:
        """Spans per second between the first and the last flush that ended before ``until``."""
        steps, last = [], 0
        for t, n in self.samples:
            if n != last and t <= until:
                steps.append((t, n))
            last = n
        if len(steps) < 2:
            return None
        (t0, n0), (t1, n1) = steps[0], steps[-1]
        return (n1 - n0) / (t1 - t0)


def breakdown(bodies: list[bytes], lake: Path, passes: int = 3) -> dict[str, float]:
    """Per-span CPU cost of each stage of the receive path, measured in this process (µs):
    the least of ``passes`` passes (the first one also pays for warming the caches, as a
    long-running collector does once)."""
    import pyarrow as pa

    from otel_assay.lake.files import Lake
    from otel_assay.collect.otlp import add_protobuf, parse_protobuf
    from otel_assay.collect.receiver import _span_keys, _RecentKeys
    from otel_assay.lake.rows import SpanBatch
    from otel_assay.collect.wal import WriteAheadLog

    clock = time.process_time
    best: dict[str, float] = {}
    for p in range(passes):
        t = {}
        s = clock(); reqs = [parse_protobuf(b) for b in bodies]; t["protobuf_parse"] = clock() - s
        batches = []
        s = clock()
        for r in reqs:
            b = SpanBatch(); add_protobuf(r, b); batches.append(b)
        t["validate_and_convert"] = clock() - s
        recent = _RecentKeys(1_000_000)
        s = clock()
        for b in batches:
            recent.add_new(_span_keys(*b.span_keys()))
        t["dedupe"] = clock() - s
        s = clock(); tables = [b.tables() for b in batches]; t["arrow_tables"] = clock() - s
        wal = WriteAheadLog(lake / f"_wal_breakdown_{p}")
        s = clock()
        for tb, b in zip(tables, batches):
            wal.append(tb, len(b))
        t["wal_append_fsync"] = clock() - s
        s = clock()
        merged = {k: pa.concat_tables([tb[k] for tb in tables]) for k in tables[0]}
        Lake(lake / f"breakdown_{p}").write(merged)
        t["parquet_flush"] = clock() - s
        wal.close()
        best = {k: min(v, best.get(k, v)) for k, v in t.items()}
    n = sum(len(b) for b in batches)
    return {k: round(v / n * 1e6, 2) for k, v in best.items()} | {"total": round(sum(best.values()) / n * 1e6, 2)}


def request(trials: int, more_resource: int, rng: random.Random, events_every: int = 0) -> bytes:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    req = synthetic.request(trials, rng=rng)
    req.resource_spans[0].resource.attributes.extend(
        KeyValue(key=f"host.label.{i}", value=AnyValue(string_value=f"value-{i}-of-this-host")) for i in range(more_resource))
    if events_every:
        spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
        for span in spans[events_every - 1::events_every]:  # a failed step's exception event
            span.events.add(time_unix_nano=span.end_time_unix_nano, name="exception").attributes.extend([
                KeyValue(key="exception.type", value=AnyValue(string_value="ValueError")),
                KeyValue(key="exception.message", value=AnyValue(string_value="order A-1234 not found")),
                KeyValue(key="exception.stacktrace", value=AnyValue(string_value="Traceback (most recent call last):\n"
                                                                                 "  File \"agent.py\", line 42\n" * 8))])
    return req.SerializeToString()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--per-request", type=int, default=50, help="trials per request (10 spans each)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--no-fsync", action="store_true")
    ap.add_argument("--overload", action="store_true", help="measure memory under sustained overload")
    ap.add_argument("--breakdown", action="store_true", help="also measure each stage's CPU cost in-process")
    ap.add_argument("--resource-attributes", type=int, default=0, metavar="N",
                    help="N more resource attributes per request (host.*, process.*, k8s.* in a real deployment; "
                         "the synthetic resource has 3)")
    ap.add_argument("--events-every", type=int, default=0, metavar="N",
                    help="an exception event (3 attributes) on every Nth span")
    args = ap.parse_args()
    if os.cpu_count() and os.cpu_count() > 1:
        os.sched_setaffinity(0, {1})

    rng = random.Random(7)
    n_requests = max(1, args.spans // (args.per_request * 10))
    bodies = [request(args.per_request, args.resource_attributes, rng, args.events_every) for _ in range(n_requests)]
    total_spans = n_requests * args.per_request * 10

    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp) / "lake"
        extra = ["--no-fsync"] if args.no_fsync else []
        if args.overload:
            extra += ["--max-buffered-spans", "100000", "--flush-seconds", "2"]
        proc, port = start_collector(lake, *extra)
        queue = list(range(len(bodies)))
        lock = threading.Lock()
        throttled = [0]

        def client() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            while True:
                with lock:
                    if not queue:
                        break
                    i = queue.pop()
                while True:
                    try:
                        conn.request("POST", "/v1/traces", bodies[i], {"Content-Type": "application/x-protobuf"})
                        r = conn.getresponse()
                        r.read()
                    except (ConnectionError, http.client.HTTPException):
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                        continue
                    if r.status == 200:
                        break
                    throttled[0] += 1
                    if r.will_close:
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    time.sleep(float(r.getheader("Retry-After", "1")) if not args.overload else 0.05)
            conn.close()

        watch = ParquetWatch(lake)
        t0 = time.perf_counter()
        cpu0, _ = proc_stat(proc.pid)
        watch.start()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t_acked = time.perf_counter()
        t_end = watch.wait_for(total_spans)
        watch.stop()
        sustained = watch.sustained(t_acked)
        cpu1, peak_rss = proc_stat(proc.pid)
        proc.terminate()
        proc.wait(timeout=60)
        on_disk = sum(f.stat().st_size for f in Lake(lake).live_files("spans"))
        stages = breakdown(bodies[:200], Path(tmp)) if args.breakdown else None

    elapsed = t_end - t0
    print(json.dumps({
        "bench": "receiver_otlp_http_protobuf" + ("_overload" if args.overload else ""),
        "spans": total_spans,
        "requests": n_requests,
        "clients": args.clients,
        "fsync": not args.no_fsync,
        "events_every": args.events_every,
        "collector_cores": 1,
        "seconds_to_acked": round(t_acked - t0, 3),
        "seconds_to_parquet": round(elapsed, 3),
        "spans_per_s_end_to_end": round(total_spans / elapsed),
        # null when fewer than two flushes ended while the clients sent (raise --spans)
        "spans_per_s_sustained": round(sustained) if sustained else None,
        "collector_cpu_s": round(cpu1 - cpu0, 3),
        "spans_per_cpu_s": round(total_spans / max(cpu1 - cpu0, 1e-9)),
        "collector_peak_rss_mib": round(peak_rss, 1),
        "throttled_responses": throttled[0],
        "bytes_per_span_on_disk": round(on_disk / total_spans, 1),
        "resource_attributes": 3 + args.resource_attributes,
        "target_spans_per_s": 60000,
        **({"cpu_us_per_span_by_stage": stages} if stages else {}),
    }))


if __name__ == "__main__":
    main()
