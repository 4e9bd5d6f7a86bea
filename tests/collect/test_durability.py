"""A collector killed with SIGKILL loses no acknowledged span and duplicates none after restart."""

from __future__ import annotations

import random
import threading
import time
import urllib.error
import urllib.request

import pyarrow.parquet as pq
import pytest

from otel_assay.collect import synthetic
from otel_assay.collect.lake import Lake


def _post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, ConnectionError, OSError):
        return -1


def _stored_span_ids(lake) -> list[str]:
    ids: list[str] = []
    for f in Lake(lake).live_files("spans"):
        ids.extend(pq.read_table(f, columns=["span_id"]).column("span_id").to_pylist())
    return ids


@pytest.mark.parametrize("flush_seconds", ["30", "0.1"])
def test_sigkill_while_clients_stream_loses_no_acknowledged_span(tmp_path, collector_factory, flush_seconds):
    """30 s: everything acknowledged is only in the write-ahead log at the kill (replay path);
    0.1 s: the kill lands while the flusher is writing Parquet and deleting log segments."""
    lake = tmp_path / "lake"
    c = collector_factory(lake, "--flush-seconds", flush_seconds, grpc=False)
    acked: list[str] = []
    unacked: list[bytes] = []
    stop = threading.Event()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            req = synthetic.request(20, rng=rng)
            status = _post(c.http_url, req.SerializeToString())
            if status == 200:
                acked.extend(synthetic.span_ids(req))
            else:
                unacked.append(req.SerializeToString())
                return

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 120
        while len(acked) < 20_000 and time.monotonic() < deadline and c.proc.poll() is None:
            time.sleep(0.05)
        assert len(acked) >= 20_000, f"only {len(acked)} spans acknowledged before the deadline"
        c.proc.kill()  # SIGKILL: no flush, no cleanup
        c.proc.wait(timeout=10)
    finally:  # never leave client threads running (pytest would hang at exit)
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert acked, "no batch was acknowledged before the kill"

    c2 = collector_factory(lake, grpc=False)
    if flush_seconds == "30":
        assert any("replayed" in line for line in c2.lines), c2.lines
    for body in unacked:  # the clients retry what was not acknowledged
        assert _post(c2.http_url, body) == 200
    code, out, err = c2.terminate()
    assert code == 0, err

    stored = _stored_span_ids(lake)
    assert len(stored) == len(set(stored)), "duplicate spans after restart"
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged spans lost"
    assert not list((lake / "_wal").glob("seg-*.wal")), "write-ahead log not drained"
