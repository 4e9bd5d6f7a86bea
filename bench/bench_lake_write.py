"""Lake write throughput and size for typical agent spans; prints one JSON line.

Builds Arrow tables from synthetic agent traces (10 spans per trial: trial root, agent,
chat and tool spans with GenAI attributes), then times `Lake.write` (sort, zstd, delta
encoding, fsync, atomic rename) and reports bytes per span on disk. Wall time is shared
with whatever else the machine runs, so CPU time per million rows is reported too, and
a breakdown of one write into its steps (sort order, take, Parquet encoding, fsync), with
the encoding also timed as one file on one thread (the writer splits a large write into files
of whole traces and encodes them in parallel).

    python bench/bench_lake_write.py [--spans 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from otel_assay.collect import synthetic
from otel_assay.lake import Lake
from otel_assay.lake.files import SORT_KEYS, _days, _file_slices, _sort_order, _take, _write_files, write_parquet_atomic
from otel_assay.collect.otlp import add_protobuf, parse_protobuf
from otel_assay.lake.rows import SpanBatch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=1_000_000)
    args = ap.parse_args()
    rng = random.Random(3)
    parts = []
    made = 0
    while made < args.spans:
        b = SpanBatch()
        add_protobuf(parse_protobuf(synthetic.request(5000, rng=rng).SerializeToString()), b)
        parts.append(b.tables())
        made += len(b)
    tables = {k: pa.concat_tables([p[k] for p in parts]) for k in parts[0]}
    n = tables["spans"].num_rows
    best = cpu = float("inf")
    for _ in range(3):
        with tempfile.TemporaryDirectory() as d:
            t, c = time.perf_counter(), time.process_time()
            res = Lake(d).write(tables)
            best = min(best, time.perf_counter() - t)
            cpu = min(cpu, time.process_time() - c)
            size = sum(f.stat().st_size for f in res.files if "/spans/" in str(f))
    print(json.dumps({
        "bench": "lake_write",
        "rows": n,
        "seconds": round(best, 3),
        "rows_per_s": round(n / best),
        "target_rows_per_s": 1_000_000,
        "cpu_s_per_1m_rows": round(cpu * 1e6 / n, 3),
        "bytes_per_span": round(size / n, 1),
        "target_bytes_per_span": 35,
        "breakdown_s": breakdown(tables["spans"]),
    }))


def breakdown(spans: pa.Table) -> dict[str, float]:
    """The steps of `Lake.write` for the spans table of one day, each the best of three."""
    steps: dict[str, float] = {}

    def timed(step, fn):
        t = time.perf_counter()
        out = fn()
        steps[step] = min(steps.get(step, float("inf")), time.perf_counter() - t)
        return out

    for _ in range(3):
        timed("days", lambda: _days(spans.column("start_time_unix_nano")))
        order = timed("sort_order", lambda: _sort_order(spans, SORT_KEYS["spans"], None))
        part = timed("take", lambda: _take(spans, order) if order is not None else spans)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "part.parquet"
            # as the writer does it: files of whole traces, encoded in parallel
            files = [(rows, Path(d) / f"part-{i}.parquet") for i, rows in enumerate(_file_slices(part))]
            timed("encode", lambda: _write_files(files, fsync=False, unique_names=True))
            # the same rows as one file on one thread, for comparison
            timed("encode_one_file", lambda: write_parquet_atomic(part, path, fsync=False))

            def fsync():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            timed("fsync", fsync)
    return {k: round(v, 3) for k, v in steps.items()}


if __name__ == "__main__":
    main()
