"""`otel-assay import` throughput, end to end into a real lake; prints one JSON line.

Synthetic agent traces (otel_assay.collect.synthetic: trial root, agent span, chat and tool
spans with GenAI attributes) written as the Collector's file exporter writes them: OTLP JSON
Lines (hex ids, int64 as strings, enum numbers) and length-prefixed protobuf. Each import is
a real `otel-assay import` process into an empty lake, Parquet write included; its CPU
seconds and peak RSS come from wait4 (the process and the workers it waited for), so the
figures hold on a machine shared with other work, where wall time does not.

- ``json`` / ``protobuf``: one file of --spans spans; ``spans_per_cpu_s`` is spans per CPU
  second of the whole command, start-up included (``startup_cpu_s``, an import of an empty
  file, is given apart).
- ``json_large``: a file of twice as many spans, for memory: the importer holds a chunk of
  200,000 spans at a time, so peak RSS stays that of one chunk whatever the file's size.
  These three run with --jobs 1: the rate per core.
- ``files_jobs_1`` / ``files_jobs_2``: --files files of --spans/2 spans each (different
  content), imported with --jobs 1 and --jobs 2: CPU (start-up of each worker included)
  and wall time.
- ``large_jobs_2``: the ``json_large`` file with --jobs 2, read as line ranges by two
  workers; ``large_speedup`` is its wall time against ``json_large``'s.

    python bench/bench_import.py [--spans 200000] [--files 4] [--cli PATH/TO/otel-assay]

``--cli`` measures another installation (an older checkout's, for before/after figures);
one without ``--jobs`` leaves out the two multi-file figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from otel_assay.collect import synthetic

T0 = 1_780_000_000_000_000_000
TRIALS_PER_LINE = 100  # 1,000 spans a line, about 800 KB: a Collector batch


def _value(v) -> dict:
    which = v.WhichOneof("value")
    if which == "int_value":
        return {"intValue": str(v.int_value)}
    if which == "bool_value":
        return {"boolValue": v.bool_value}
    if which == "double_value":
        return {"doubleValue": v.double_value}
    return {"stringValue": v.string_value}


def _attributes(kvs) -> list:
    return [{"key": kv.key, "value": _value(kv.value)} for kv in kvs]


def _json_line(req) -> bytes:
    """The request as the Collector's file exporter writes a line of it."""
    doc = {"resourceSpans": [{
        "resource": {"attributes": _attributes(rs.resource.attributes)},
        "scopeSpans": [{"scope": {"name": ss.scope.name}, "spans": [
            {"traceId": s.trace_id.hex(), "spanId": s.span_id.hex(),
             **({"parentSpanId": s.parent_span_id.hex()} if s.parent_span_id else {}),
             "flags": 256, "name": s.name, "kind": s.kind, "startTimeUnixNano": str(s.start_time_unix_nano),
             "endTimeUnixNano": str(s.end_time_unix_nano), "attributes": _attributes(s.attributes), "status": {}}
            for s in ss.spans]} for ss in rs.scope_spans]} for rs in req.resource_spans]}
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def write_files(directory: Path, name: str, spans: int, seed: int) -> tuple[Path, Path]:
    rng = random.Random(seed)
    jsonl, binpb = directory / f"{name}.jsonl", directory / f"{name}.binpb"
    with open(jsonl, "wb") as fj, open(binpb, "wb") as fp:
        for i in range(max(1, spans // (TRIALS_PER_LINE * 10))):
            req = synthetic.request(TRIALS_PER_LINE, rng=rng, start_ns=T0 + i * 10**9)
            fj.write(_json_line(req))
            body = req.SerializeToString()
            fp.write(struct.pack(">I", len(body)) + body)
    return jsonl, binpb


def measure(cli: list[str], files: list[Path], lake: Path, *extra: str, repeat: int = 2) -> dict:
    """The run of least CPU of ``repeat`` (the machine is shared: the least is the cost)."""
    runs = [_run(cli, files, lake, *extra) for _ in range(repeat)]
    return min(runs, key=lambda r: r["cpu_s"])


def _run(cli: list[str], files: list[Path], lake: Path, *extra: str) -> dict:
    """One `otel-assay import` into an empty lake: spans, CPU seconds, wall seconds, peak RSS
    (of the process and of the workers it waited for, from wait4)."""
    shutil.rmtree(lake, ignore_errors=True)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([*cli, "import", *map(str, files), "--dir", str(lake), *extra], stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"import failed ({proc.returncode}): {stdout[-500:]} {stderr[-2000:]}")
    spans = int(stdout.rsplit("imported ", 1)[1].split()[0])
    cpu = usage.ru_utime + usage.ru_stime
    shutil.rmtree(lake, ignore_errors=True)
    return {"spans": spans, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
            "spans_per_cpu_s": round(spans / cpu) if spans else None, "peak_rss_mib": round(usage.ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=200_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--cli", default=None, help="the otel-assay command to measure (default: this checkout's)")
    args = ap.parse_args()
    cli = [args.cli] if args.cli else [sys.executable, "-m", "otel_assay"]
    jobs = b"--jobs" in subprocess.run([*cli, "import", "--help"], capture_output=True).stdout
    one = ("--jobs", "1") if jobs else ()
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        d = Path(tmp)
        lake = d / "lake"
        jsonl, binpb = write_files(d, "one", args.spans, seed=1)
        large, _ = write_files(d, "large", 2 * args.spans, seed=2)
        many = [write_files(d, f"part{i}", args.spans // 2, seed=10 + i)[0] for i in range(args.files)]
        empty = d / "empty.json"
        empty.write_text('{"resourceSpans": []}')
        result = {
            "bench": "import",
            "cli": " ".join(cli),
            "cores": len(os.sched_getaffinity(0)),
            "json_mib": round(jsonl.stat().st_size / 2**20, 1),
            "protobuf_mib": round(binpb.stat().st_size / 2**20, 1),
            "startup_cpu_s": _run(cli, [empty], lake)["cpu_s"],
            "json": measure(cli, [jsonl], lake, *one),
            "protobuf": measure(cli, [binpb], lake, *one),
            "json_large": measure(cli, [large], lake, *one, repeat=1),
        }
        if jobs:
            result["files_jobs_1"] = measure(cli, many, lake, "--jobs", "1", repeat=1)
            result["files_jobs_2"] = measure(cli, many, lake, "--jobs", "2", repeat=1)
            result["large_jobs_2"] = measure(cli, [large], lake, "--jobs", "2", repeat=1)
            result["large_speedup"] = round(result["json_large"]["wall_s"] / result["large_jobs_2"]["wall_s"], 2)
            result["files_speedup"] = round(result["files_jobs_1"]["wall_s"] / result["files_jobs_2"]["wall_s"], 2)
    for key in ("json", "protobuf", "json_large"):  # the import's own rate, start-up left out
        r = result[key]
        r["spans_per_cpu_s_after_startup"] = round(r["spans"] / max(r["cpu_s"] - result["startup_cpu_s"], 0.01))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
