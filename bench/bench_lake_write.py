"""Lake write throughput and size for typical agent spans; prints one JSON line.

Builds Arrow tables from synthetic agent traces (10 spans per trial: trial root, agent,
chat and tool spans with GenAI attributes), then times `Lake.write` (sort, zstd, delta
encoding, fsync, atomic rename) and reports bytes per span on disk.

    python bench/bench_lake_write.py [--spans 1000000]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time

import pyarrow as pa

from otel_assay.collect import Lake, synthetic
from otel_assay.collect.otlp import add_protobuf, parse_protobuf
from otel_assay.collect.schema import SpanBatch


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
    best = float("inf")
    for _ in range(3):
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            res = Lake(d).write(tables)
            best = min(best, time.perf_counter() - t)
            size = sum(f.stat().st_size for f in res.files if "/spans/" in str(f))
    print(json.dumps({
        "bench": "lake_write",
        "rows": n,
        "seconds": round(best, 3),
        "rows_per_s": round(n / best),
        "target_rows_per_s": 1_000_000,
        "bytes_per_span": round(size / n, 1),
        "target_bytes_per_span": 35,
    }))


if __name__ == "__main__":
    main()
