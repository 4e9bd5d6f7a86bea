"""A collector killed with SIGKILL loses no acknowledged span and duplicates none after restart."""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from otel_assay.collect import synthetic
from otel_assay.lake.files import Lake


def _post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, ConnectionError, OSError):
        return -1


def _health(http_url: str) -> tuple[int, dict]:
    url = http_url.replace("/v1/traces", "/health")
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


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


def test_a_second_collector_on_the_same_lake_is_refused_and_harms_nothing(tmp_path, collector_factory):
    """It would replay (and delete) the running collector's live log segment."""
    import subprocess
    import sys

    lake = tmp_path / "lake"
    first = collector_factory(lake, "--flush-seconds", "60")
    bodies = [synthetic.request(20, rng=random.Random(i)).SerializeToString() for i in range(5)]
    assert [_post(first.http_url, b) for b in bodies] == [200] * 5
    p = subprocess.run([sys.executable, "-m", "otel_assay", "collect", "--dir", str(lake), "--grpc", "off",
                        "--http", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "another otel-assay collect is using this lake" in p.stderr, p.stderr
    assert _post(first.http_url, bodies[0]) == 200  # retransmission: acknowledged, stored once
    first.kill()  # a crash: what was acknowledged is in the log, still there to replay
    second = collector_factory(lake)
    code, out, _ = second.terminate()
    assert code == 0 and "replayed 1000 spans" in "".join(second.lines) + out
    ids = _stored_span_ids(lake)
    assert len(ids) == len(set(ids)) == 1000


def test_a_short_write_to_the_log_is_not_acknowledged(tmp_path, monkeypatch):
    """A disk filling up can write part of a record: the batch fails and the log stays readable."""
    from otel_assay.lake.rows import SpanBatch
    from otel_assay.collect.otlp import add_protobuf, parse_protobuf
    from otel_assay.collect.wal import WALError, WriteAheadLog, read_segment

    def batch(seed):
        b = SpanBatch()
        add_protobuf(parse_protobuf(synthetic.request(5, rng=random.Random(seed)).SerializeToString()), b)
        return b.tables(), len(b)

    wal = WriteAheadLog(tmp_path / "_wal")
    wal.append(*batch(1))
    real = wal._file

    class Full:  # the log file, but writes half of what it is given once, then nothing
        def __init__(self):
            self.calls = 0

        def write(self, b):
            self.calls += 1
            return real.write(bytes(b)[: len(b) // 2]) if self.calls == 1 else 0

        def __getattr__(self, name):
            return getattr(real, name)

    wal._file = Full()
    with pytest.raises(WALError, match="no space left"):
        wal.append(*batch(2))
    wal._file = real
    assert "no space left" in wal.fault
    with pytest.raises(WALError, match="no space left"):  # nothing more until a seal has probed the disk
        wal.append(*batch(3))
    first = wal.seal()
    assert wal.fault is None
    wal.append(*batch(3))
    second = wal._segment.path
    wal.close()
    skipped = []
    assert len(list(read_segment(first.path, skipped))) == 1 and not skipped  # the torn half was taken back
    assert len(list(read_segment(second))) == 1


def test_batches_with_and_without_events_and_links_share_one_log_and_one_parquet_write(tmp_path):
    """A batch without events or links logs shared empty tables: they must have the schema of
    the tables a batch with events and links builds, or the flush that concatenates both fails."""
    from otel_assay.collect import wal as wal_mod
    from otel_assay.lake.files import Lake
    from otel_assay.lake.rows import SpanBatch, make_resource
    from otel_assay.collect.wal import WriteAheadLog, read_segment

    res = make_resource([("service.name", "agent")])

    def batch(with_events_and_links: bool):
        b = SpanBatch()
        for i in range(3):
            b.add_span(trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}", parent_span_id=None, name="s",
                       kind=1, start_time_unix_nano=1_700_000_000_000_000_000 + i,
                       end_time_unix_nano=1_700_000_000_000_000_100 + i, status_code=0, status_message=None,
                       trace_state=None, scope_name="t", scope_version=None, resource=res,
                       attributes=[("gen_ai.operation.name", "chat")],
                       events=[(1_700_000_000_000_000_050, "e", [("k", "v")], 0)] if with_events_and_links else (),
                       links=[(f"{9:032x}", f"{9:016x}", None, [("l", 1)], 0)] if with_events_and_links else ())
        return b.tables(), len(b)

    full, plain = batch(True), batch(False)
    for name, t in plain[0].items():
        assert t.schema.equals(full[0][name].schema, check_metadata=True), name
    assert plain[0]["span_events"].num_rows == 0 and full[0]["span_events"].num_rows == 3
    log = WriteAheadLog(tmp_path / "_wal")
    log.append(*plain)
    log.append(*full)
    log.append(*plain)
    path = log._segment.path
    log.close()
    records = [wal_mod.decode(r) for r in read_segment(path)]
    assert [r["span_links"].num_rows for r in records] == [0, 3, 0]
    lake = Lake(tmp_path / "lake")
    lake.write({name: pa.concat_tables([r[name] for r in records]) for name in wal_mod.TABLE_ORDER}, token="t")
    assert sum(pq.read_metadata(f).num_rows for f in lake.live_files("span_events")) == 3
    assert sum(pq.read_metadata(f).num_rows for f in lake.live_files("spans")) == 9


def test_a_failed_parquet_write_is_retried_and_pushes_back_meanwhile(tmp_path, monkeypatch):
    """A full disk: the acknowledged spans stay in the log, count as buffered (so the receiver
    says 503 instead of growing), and reach Parquet at the next flush once writes work."""
    from otel_assay.collect.receiver import Collector, Overloaded

    c = Collector(tmp_path / "lake", max_buffered_spans=300, flush_seconds=3600)
    real_write = Lake.write
    failing = [True]

    def write(self, tables, **kw):
        if failing[0]:
            raise OSError(28, "No space left on device")
        return real_write(self, tables, **kw)

    monkeypatch.setattr(Lake, "write", write)
    try:
        c.submit_protobuf(synthetic.request(20, rng=random.Random(1)).SerializeToString())  # 200 spans
        assert c.flush() == 0 and c.unwritten_spans == 200 and c.buffered_rows == 200
        c.submit_protobuf(synthetic.request(10, rng=random.Random(2)).SerializeToString())  # 100 more
        with pytest.raises(Overloaded):
            c.check_capacity()
        failing[0] = False
        # the collector's own flusher retries every 0.25 s and may get there first
        c.flush()
        assert c.unwritten_spans == 0 and c.stats.spans_written == 300
        assert sorted(_stored_span_ids(tmp_path / "lake")) == sorted(set(_stored_span_ids(tmp_path / "lake")))
        assert len(_stored_span_ids(tmp_path / "lake")) == 300
        assert not [p for p in (tmp_path / "lake" / "_wal").glob("seg-*.wal") if p.stat().st_size]
    finally:
        c.close()


def test_spans_being_retried_still_count_against_the_buffer_bound(tmp_path, monkeypatch):
    """While a flush retries writes that failed before, their spans are still waiting: the
    receiver must keep pushing back rather than let a full buffer's worth more in."""
    from otel_assay.collect.receiver import Collector, Overloaded

    c = Collector(tmp_path / "lake", max_buffered_spans=300, flush_seconds=3600)  # flushes itself at 150
    in_write, release = threading.Event(), threading.Event()

    def write(self, tables, **kw):
        in_write.set()
        release.wait(30)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Lake, "write", write)

    def flush_in_background() -> threading.Thread:
        in_write.clear()
        release.clear()
        t = threading.Thread(target=c.flush)
        t.start()
        assert in_write.wait(30)
        return t

    try:
        c.submit_protobuf(synthetic.request(10, rng=random.Random(1)).SerializeToString())  # 100 spans
        t = flush_in_background()
        release.set()
        t.join()
        assert c.unwritten_spans == 100
        c.submit_protobuf(synthetic.request(10, rng=random.Random(2)).SerializeToString())  # 200 waiting
        t = flush_in_background()  # retrying the first 100, the second 100 sealed behind them
        c.submit_protobuf(synthetic.request(10, rng=random.Random(3)).SerializeToString())  # 300 waiting
        try:
            with pytest.raises(Overloaded):
                c.check_capacity()
        finally:
            release.set()
            t.join()
        assert c.buffered_rows == 300
    finally:
        monkeypatch.undo()
        c.close()


def test_a_small_buffer_is_flushed_when_half_full_not_at_the_timer(tmp_path):
    from otel_assay.collect.receiver import Collector

    c = Collector(tmp_path / "lake", max_buffered_spans=400, flush_seconds=3600)
    try:
        c.submit_protobuf(synthetic.request(25, rng=random.Random(3)).SerializeToString())  # 250 >= 400 / 2
        deadline = time.monotonic() + 10
        while c.buffered_rows and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.buffered_rows == 0 and len(_stored_span_ids(tmp_path / "lake")) == 250
    finally:
        c.close()


def test_compaction_leaves_the_files_of_a_log_segment_that_is_still_there(tmp_path):
    """A collector that died between writing a segment's Parquet files and deleting the
    segment replays it at start, rewriting files of the same names. Had compaction merged
    those files away meanwhile, the replay would store their spans a second time."""
    from otel_assay.collect.otlp import add_protobuf, parse_protobuf
    from otel_assay.collect.receiver import Collector
    from otel_assay.lake.rows import SpanBatch
    from otel_assay.collect.wal import WriteAheadLog

    def tables(seed):
        b = SpanBatch()
        add_protobuf(parse_protobuf(synthetic.request(10, rng=random.Random(seed)).SerializeToString()), b)
        return b.tables(), len(b)

    lake = Lake(tmp_path / "lake")
    lake.ensure_writable()
    lake.write(tables(1)[0])                  # an earlier file of the same day: something to merge with
    wal = WriteAheadLog(lake.wal_dir, fsync=False)
    t, n = tables(2)
    wal.append(t, n)
    segment = wal.seal()
    lake.write(t, token=segment.token)        # the flusher wrote the segment's Parquet files...
    wal.close()                               # ...and the collector died before deleting the segment
    in_flight = [f for f in lake.live_files("spans") if segment.token in f.name]
    assert in_flight

    lake.compact(grace_seconds=0)
    assert all(f.exists() for f in in_flight)
    c = Collector(tmp_path / "lake", flush_seconds=3600)  # replays the segment
    c.close()
    ids = _stored_span_ids(tmp_path / "lake")
    assert len(ids) == len(set(ids)) == 200
    lake.compact(grace_seconds=0)             # the segment is gone: now they merge
    assert not any(f.exists() for f in in_flight)
    ids = _stored_span_ids(tmp_path / "lake")
    assert len(ids) == len(set(ids)) == 200


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_batch_that_failed_to_store_is_not_taken_for_a_duplicate_when_retried(tmp_path, monkeypatch, compiled):
    """Its keys entered the dedupe window before the tables were built: a failure there left
    them in it, and the client's retry of the same spans was acknowledged and dropped."""
    from otel_assay.collect import compiled as compiled_decoder
    from otel_assay.collect.receiver import Collector
    from otel_assay.lake.rows import SpanBatch

    if compiled:
        assert compiled_decoder.available(), "the compiled decoder is not built (pip install -e . builds it)"
    else:
        monkeypatch.setenv("OTEL_ASSAY_PURE_PYTHON", "1")
    batch_class = compiled_decoder.CompiledBatch if compiled else SpanBatch
    c = Collector(tmp_path / "lake", flush_seconds=3600)
    body = synthetic.request(3, rng=random.Random(4)).SerializeToString()
    real_tables = batch_class.tables

    def tables(self, keep=None):
        raise RuntimeError("boom")

    try:
        monkeypatch.setattr(batch_class, "tables", tables)
        with pytest.raises(RuntimeError):
            c.submit_protobuf(body)
        monkeypatch.setattr(batch_class, "tables", real_tables)
        r = c.submit_protobuf(body)
        assert r.duplicates == 0 and r.accepted == 30
        c.flush()
        assert len(_stored_span_ids(tmp_path / "lake")) == 30
    finally:
        c.close()


def test_a_new_log_segment_is_made_durable_by_name_too(tmp_path, monkeypatch):
    """fsync on the segment file does not make its directory entry durable (POSIX); the
    segment must not vanish with a power loss after its batches were acknowledged."""
    from otel_assay.lake import files as lake_module
    from otel_assay.collect.wal import WriteAheadLog

    synced = []
    real = lake_module.fsync_dir
    monkeypatch.setattr(lake_module, "fsync_dir", lambda p: (synced.append(p), real(p)))
    wal = WriteAheadLog(tmp_path / "_wal")
    wal.seal()
    wal.close()
    assert synced.count(tmp_path / "_wal") == 2  # the first segment and the one the seal opened
    synced.clear()
    WriteAheadLog(tmp_path / "_wal2", fsync=False).close()
    assert not synced


def test_a_resend_that_races_a_failing_first_attempt_is_stored(tmp_path, monkeypatch):
    """A client that timed out resends while its first attempt is still being fsynced. The
    first attempt then fails. The resend must not have been taken for a duplicate of spans
    that never reached the log (acknowledged, and lost)."""
    from otel_assay.collect.receiver import Collector
    from otel_assay.collect.wal import WALError

    c = Collector(tmp_path / "lake", flush_seconds=3600)
    body = synthetic.request(3, rng=random.Random(9)).SerializeToString()
    real_append = c.wal.append
    first_in_log, release = threading.Event(), threading.Event()
    calls = []

    def append(tables, rows):
        calls.append(rows)
        if len(calls) == 1:  # the first attempt: stalls in fsync, then the disk fails
            first_in_log.set()
            release.wait(10)
            raise WALError("I/O error")
        return real_append(tables, rows)

    monkeypatch.setattr(c.wal, "append", append)
    outcome = {}

    def first():
        try:
            c.submit_protobuf(body)
        except WALError as e:
            outcome["first"] = e

    def resend():
        outcome["resend"] = c.submit_protobuf(body)

    try:
        t1 = threading.Thread(target=first)
        t1.start()
        assert first_in_log.wait(10)
        t2 = threading.Thread(target=resend)
        t2.start()
        time.sleep(0.3)  # the resend is waiting for the first attempt, not answered yet
        assert "resend" not in outcome
        release.set()
        t1.join(10)
        t2.join(10)
        assert isinstance(outcome.get("first"), WALError)
        r = outcome["resend"]
        assert r.duplicates == 0 and r.accepted == 30
        c.flush()
        assert len(_stored_span_ids(tmp_path / "lake")) == 30
        # and a third copy, after the resend is stored, is a duplicate as before
        again = c.submit_protobuf(body)
        assert again.duplicates == 30 and again.accepted == 0
    finally:
        release.set()
        c.close()


def test_a_key_given_back_and_claimed_again_stays_for_a_whole_window():
    """A failed commit gives its keys back (forget) and the client's retry claims them
    again. The key's first, forgotten entry used to stay in the FIFO: when it left the
    window it took the retry's entry with it, so a second retransmission of that span a
    moment later was stored twice. The stale entries also counted against the capacity."""
    from otel_assay.collect.receiver import _RecentKeys

    w = _RecentKeys(4)
    assert w.add_new([1, 2]) == [True, True]
    w.forget([1])                     # the commit holding 1 failed
    assert w.add_new([1]) == [True]   # the retry claims it again
    assert w.add_new([3, 4]) == [True, True]
    # the window holds 2, 1, 3, 4; one more key evicts 2, the oldest, and nothing else
    assert w.add_new([5]) == [True]
    assert 2 not in w and all(k in w for k in (1, 3, 4, 5))
    assert w.add_new([1]) == [False]  # a second retransmission is still a duplicate
    assert w.add_new([6]) == [True]
    assert 1 not in w and all(k in w for k in (3, 4, 5, 6))


def test_an_outage_that_fails_every_commit_keeps_the_window_bounded():
    from otel_assay.collect.receiver import _RecentKeys

    w = _RecentKeys(1000)
    for attempt in range(200):        # the same 1000 spans, claimed and given back each time
        keys = list(range(1000))
        assert all(w.add_new(keys))
        w.forget(keys)
        assert len(w._fifo) <= 3000
    assert all(w.add_new(list(range(1000))))
    assert w.add_new(list(range(1000))) == [False] * 1000


def _records(path) -> list[tuple[int, int]]:
    """(offset, length) of each record of a log segment, read by its framing alone."""
    import struct

    data = path.read_bytes()
    out, off = [], 0
    while off < len(data):
        magic, n, _crc = struct.unpack_from("<4sII", data, off)
        assert magic == b"OAW1"
        out.append((off, 12 + n))
        off += 12 + n
    return out


@pytest.mark.parametrize("damage", ["flipped-bytes", "torn-record-left-in-the-middle"])
def test_a_damaged_record_in_the_middle_of_a_log_segment_costs_only_itself(tmp_path, collector_factory, damage):
    """A record that fails its check mid-segment ended the replay of the segment without a
    word: the acknowledged records after it were lost."""
    lake = tmp_path / "lake"
    c = collector_factory(lake, "--flush-seconds", "600", grpc=False)
    bodies = [synthetic.request(2, rng=random.Random(seed)).SerializeToString() for seed in (1, 2, 3)]
    for body in bodies:
        assert _post(c.http_url, body) == 200
    c.kill()  # a crash: the three batches are only in the log
    (seg,) = [p for p in (lake / "_wal").glob("seg-*.wal") if p.stat().st_size]
    records = _records(seg)
    assert len(records) == 3
    data = bytearray(seg.read_bytes())
    off, length = records[1]
    if damage == "flipped-bytes":
        data[off + length // 2: off + length // 2 + 8] = b"\xde\xad\xbe\xef" * 2
        expected = 40  # the first and the last batch
    else:
        # a write the disk cut short whose bytes could not be taken back: the next append follows them
        torn = bytes(data[off: off + length // 2])
        data[off:off] = torn
        expected = 60
    seg.write_bytes(bytes(data))

    c2 = collector_factory(lake, "--flush-seconds", "600", grpc=False)
    assert any("replayed" in line for line in c2.lines)
    code, _out, err = c2.terminate()
    assert code == 0, err
    ids = _stored_span_ids(lake)
    assert len(ids) == len(set(ids)) == expected
    first_and_last = {s.span_id.hex() for b in (bodies[0], bodies[2])
                      for s in __import__("opentelemetry.proto.collector.trace.v1.trace_service_pb2", fromlist=["x"])
                      .ExportTraceServiceRequest.FromString(b).resource_spans[0].scope_spans[0].spans}
    assert first_and_last <= set(ids)
    assert f"segment {seg.name} is damaged" in err and "recovered the" in err
    assert (lake / "_wal" / "damaged" / seg.name).read_bytes() == bytes(data)  # kept for a look, not replayed
    # a further start replays nothing again: nothing is stored twice
    c3 = collector_factory(lake, "--flush-seconds", "600", grpc=False)
    code, _out, err = c3.terminate()
    assert code == 0 and "damaged" not in err
    assert sorted(_stored_span_ids(lake)) == sorted(ids)


def test_the_dedupe_window_matches_a_plain_model_of_it():
    """Random batches (new keys, keys seen before, keys repeated within a batch) and
    commits that fail (forget), against the window's meaning: the last ``capacity`` keys
    taken, oldest out first, a key given back no longer in it."""
    import random
    from collections import OrderedDict

    from otel_assay.collect.receiver import _RecentKeys

    rng = random.Random(11)
    for capacity in (1, 5, 50):
        w, model = _RecentKeys(capacity), OrderedDict()
        for _ in range(3000):
            keys = [rng.randrange(3 * capacity + 3) for _ in range(rng.randrange(0, 2 * capacity + 2))]
            if rng.random() < 0.15:
                gone = rng.sample(sorted(set(keys) | set(model)), k=min(3, len(set(keys) | set(model))))
                w.forget(gone)
                for k in gone:
                    model.pop(k, None)
                continue
            want = []
            for k in keys:
                want.append(k not in model)
                model[k] = None
            while len(model) > capacity:
                model.popitem(last=False)
            assert w.add_new(keys) == want
            assert w._set == set(model)


# ---------------------------------------------------------------------------- faults that heal
def _request(seed: int, n: int = 10) -> bytes:
    return synthetic.request(n, rng=random.Random(seed)).SerializeToString()


def _wait_for(cond, timeout: float = 15.0, what: str = "") -> float:
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < timeout, f"not within {timeout} s: {what}"
        time.sleep(0.02)
    return time.monotonic() - start


def _submit_until_acked(c, body: bytes, timeout: float = 15.0) -> int:
    """Retry a body as an OTLP exporter does (on Overloaded and WALError); its accepted spans."""
    from otel_assay.collect.receiver import Overloaded
    from otel_assay.collect.wal import WALError

    deadline = time.monotonic() + timeout
    while True:
        try:
            return c.submit_protobuf(body).accepted
        except (Overloaded, WALError):
            assert time.monotonic() < deadline, f"not acknowledged within {timeout} s: {c.health()}"
            time.sleep(0.05)


def test_a_segment_that_fails_to_open_once_is_refused_then_healed_by_the_flusher(tmp_path, monkeypatch):
    """Opening a new log segment fails (a read-only _wal, no inodes, EMFILE): the flusher used
    to die, the next request got 500 on a closed file, and every later one hung. Now requests
    get Overloaded (503) naming the cause, /health says unavailable, and the flusher's own
    retry heals the log: no restart, and every acknowledged span reaches Parquet once."""
    from otel_assay.collect.receiver import Collector, Overloaded
    from otel_assay.lake import files as lake_module

    c = Collector(tmp_path / "lake", flush_seconds=0.1)
    real = lake_module.fsync_dir
    failing = threading.Event()

    def fsync_dir(path):
        if failing.is_set():
            raise OSError(30, "Read-only file system")
        return real(path)

    monkeypatch.setattr(lake_module, "fsync_dir", fsync_dir)
    acked = 0
    try:
        acked += c.submit_protobuf(_request(1)).accepted
        failing.set()
        _wait_for(lambda: c.health().status == "unavailable", what="the failed seal is seen")
        h = c.health()
        assert "Read-only file system" in h.cause and h.since_s is not None
        with pytest.raises(Overloaded, match="cannot take writes now .*Read-only") as refused:
            c.submit_protobuf(_request(2))
        assert refused.value.retry_after >= 1
        time.sleep(0.5)  # several retries fail meanwhile; the flusher lives on
        assert c._flusher.is_alive() and c.health().status == "unavailable"
        failing.clear()
        healed = _wait_for(lambda: c.health().status == "ok", what="the flusher heals the log")
        assert healed < 6.0  # the retry interval is at most 5 s
        acked += _submit_until_acked(c, _request(2))
        assert c.stats.faults == 1 and c.stats.longest_fault_s > 0
    finally:
        c.close()
    ids = _stored_span_ids(tmp_path / "lake")
    assert len(ids) == len(set(ids)) == acked == 200


def test_the_lake_deleted_under_the_collector_stops_acks_and_heals_when_it_is_back(tmp_path):
    """rm -rf of the lake used to be acknowledged batch after batch into a log file that no
    longer existed. Now the next batch is refused, /health names the missing directory, the
    spans acknowledged before (in memory only, their segment deleted) are written once the
    lake is there again, and acknowledging resumes by itself."""
    import shutil

    from otel_assay.collect.receiver import Collector
    from otel_assay.collect.wal import WALError

    lake = tmp_path / "lake"
    c = Collector(lake, flush_seconds=3600)  # nothing reaches Parquet before the deletion
    try:
        before = c.submit_protobuf(_request(1)).accepted
        shutil.rmtree(lake)
        with pytest.raises(WALError, match="is gone"):
            c.submit_protobuf(_request(2))
        assert c.health().status == "unavailable" and "gone" in c.health().cause
        time.sleep(0.5)  # the flusher's retries find no lake: it is not made again behind the user's back
        assert not lake.exists()
        lake.mkdir()
        _wait_for(lambda: c.health().status == "ok", what="the collector heals once the lake is back")
        after = _submit_until_acked(c, _request(2))
    finally:
        c.close()
    ids = _stored_span_ids(lake)
    assert len(ids) == len(set(ids)) == before + after == 200
    assert (lake / "_wal" / "LOCK").exists()  # the log's lock is held on the new directory


def test_health_never_says_ok_while_a_parquet_write_is_being_retried(tmp_path, monkeypatch):
    """The failed segments leave the retry list while a flush retries them: /health read
    "unwritten spans = 0" then and said ok during the disk-full retry (1-2 of 200 polls)."""
    from otel_assay.collect.receiver import Collector

    c = Collector(tmp_path / "lake", flush_seconds=3600)
    real_write = Lake.write
    failing = [True]

    def write(self, tables, **kw):
        if failing[0]:
            time.sleep(0.005)  # a slow failing write: the window the poll used to land in
            raise OSError(28, "No space left on device")
        return real_write(self, tables, **kw)

    monkeypatch.setattr(Lake, "write", write)
    try:
        c.submit_protobuf(_request(1))
        c.flush()
        seen: list[str] = []
        stop = threading.Event()

        def flusher():
            while not stop.is_set():
                c.flush()

        t = threading.Thread(target=flusher)
        t.start()
        try:
            for _ in range(400):
                seen.append(c.health().status)
                time.sleep(0.001)
        finally:
            stop.set()
            t.join()
        assert set(seen) == {"degraded"}, {s: seen.count(s) for s in set(seen)}
        assert "No space left" in c.health().cause
        failing[0] = False
        c.flush()
        assert c.health().status == "ok" and c.unwritten_spans == 0
    finally:
        c.close()


def test_the_flusher_survives_a_bug_and_keeps_the_spans(tmp_path, monkeypatch):
    """An unexpected exception in a write used to end the flusher thread for good."""
    from otel_assay.collect.receiver import Collector

    c = Collector(tmp_path / "lake", flush_seconds=0.1)
    real_write = Lake.write
    calls = []

    def write(self, tables, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return real_write(self, tables, **kw)

    monkeypatch.setattr(Lake, "write", write)
    try:
        c.submit_protobuf(_request(1))
        _wait_for(lambda: len(calls) >= 2 and c.unwritten_spans == 0, what="the flusher writes after the bug")
        assert c._flusher.is_alive()
    finally:
        c.close()
    assert len(_stored_span_ids(tmp_path / "lake")) == 100


def test_sigterm_with_the_lake_gone_exits_in_bounded_time_and_says_what_is_lost(tmp_path, collector_factory):
    import shutil

    lake = tmp_path / "lake"
    c = collector_factory(lake, "--flush-seconds", "3600", grpc=False)
    assert _post(c.http_url, _request(1)) == 200
    shutil.rmtree(lake)
    assert _post(c.http_url, _request(2)) == 503
    status, doc = _health(c.http_url)
    assert status == 503 and doc["status"] == "unavailable" and "gone" in doc["cause"], doc
    start = time.monotonic()
    code, out, err = c.terminate(timeout=30)
    assert time.monotonic() - start < 25
    assert code == 4 and "100 acknowledged spans could not be written" in err and "deleted" in err, (out, err)
    assert "Traceback" not in err


def test_an_unexpected_error_in_a_log_write_never_leaves_the_log_wedged(tmp_path, monkeypatch):
    """Any exception in the group write (a stat that fails with EACCES, say) used to leave the
    log's writing flag set: every later request and the stop waited for ever."""
    from otel_assay.collect.receiver import Collector, Overloaded
    from otel_assay.collect.wal import WALError, WriteAheadLog

    c = Collector(tmp_path / "lake", flush_seconds=0.1)
    real = WriteAheadLog._in_place
    broken = threading.Event()
    broken.set()

    def in_place(self):
        if broken.is_set():
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(WriteAheadLog, "_in_place", in_place)
    try:
        with pytest.raises(WALError, match="PermissionError"):
            c.submit_protobuf(_request(1))
        with pytest.raises(Overloaded):
            c.submit_protobuf(_request(2))
        broken.clear()
        acked = _submit_until_acked(c, _request(3))
    finally:
        closer = threading.Thread(target=c.close)
        closer.start()
        closer.join(15)
        assert not closer.is_alive(), "close() hangs"
    assert len(_stored_span_ids(tmp_path / "lake")) == acked == 100


def test_a_segment_deleted_while_its_batch_is_fsynced_is_not_acknowledged(tmp_path, monkeypatch):
    import os
    import shutil

    from otel_assay.collect.receiver import Collector
    from otel_assay.collect.wal import WALError

    lake = tmp_path / "lake"
    c = Collector(lake, flush_seconds=3600)
    real_fsync = os.fsync

    def slow_fsync(fd):  # a slow disk; the deletion during it is real
        time.sleep(0.5)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    threading.Timer(0.2, shutil.rmtree, (lake,)).start()
    try:
        with pytest.raises(WALError, match="is gone"):
            c.submit_protobuf(_request(1))
    finally:
        monkeypatch.undo()
        c.close()


def test_a_collector_that_lost_its_lake_to_another_leaves_the_others_log_alone(tmp_path):
    """The lake deleted and made again, and a second collector started on it first: the first
    stays unavailable (naming the other), and its stop used to delete every empty segment in
    the log directory, the other's live one included."""
    import shutil

    from otel_assay.collect.receiver import Collector

    lake = tmp_path / "lake"
    a = Collector(lake, flush_seconds=3600)
    a.submit_protobuf(_request(1))
    shutil.rmtree(lake)
    _wait_for(lambda: a.health().status == "unavailable", what="A sees the lake gone")
    lake.mkdir()
    b = Collector(lake, flush_seconds=3600)
    try:
        _wait_for(lambda: "another otel-assay collect" in (a.health().cause or ""), what="A finds B's lock")
        live = b.wal._segment.path
        a.close()
        assert live.exists()
        assert b.submit_protobuf(_request(2)).accepted == 100 and b.health().status == "ok"
    finally:
        b.close()
    assert a.lost_spans == 0  # A wrote its 100 acknowledged spans into the lake B now owns: nothing lost
    ids = _stored_span_ids(lake)
    assert len(ids) == len(set(ids)) == 200


def test_a_failing_parquet_write_backs_off_and_is_logged_once(tmp_path, caplog):
    """Each flush used to retry every waiting segment and log one line per segment: the lines
    grew with the outage (15, 55, 120, 210, 351 after 10 to 50 s)."""
    import logging
    import shutil

    from otel_assay.collect import receiver
    from otel_assay.collect.receiver import Collector

    lake = tmp_path / "lake"
    c = Collector(lake, flush_seconds=0.05)
    caplog.set_level(logging.INFO, logger="otel_assay.collect")
    try:
        shutil.rmtree(lake / "spans")
        (lake / "spans").write_text("not a directory")  # every Parquet write of spans fails
        for seed in range(6):
            c.submit_protobuf(_request(seed, 2))
            c.flush()
        errors = [r for r in caplog.records if "writing Parquet" in r.getMessage()]
        assert len(errors) == 1, [r.getMessage() for r in errors]
        assert c.health().status == "degraded" and c.unwritten_spans == 120
        # the flusher waits longer each time: flush_seconds, then doubling up to the cap
        assert c._parquet_delay == pytest.approx(min(receiver.PARQUET_RETRY_MAX_S, 0.05 * 2 ** 5))
        (lake / "spans").unlink()
        c.flush()
        assert c.health().status == "ok" and c.unwritten_spans == 0
        assert any("works again" in r.getMessage() for r in caplog.records)
    finally:
        c.close()
    assert len(_stored_span_ids(lake)) == 120


def test_a_log_segment_that_cannot_be_deleted_is_written_once_and_its_deletion_retried(tmp_path, monkeypatch):
    """The write succeeded but the delete failed (an immutable or read-only _wal): it was taken
    for a failed write, rewritten at every flush and counted again each time."""
    from pathlib import Path

    from otel_assay.collect.receiver import Collector

    c = Collector(tmp_path / "lake", flush_seconds=3600)
    real_unlink = Path.unlink
    refusals = [2]

    def unlink(self, missing_ok=False):
        if self.suffix == ".wal" and refusals[0] > 0:
            refusals[0] -= 1
            raise PermissionError(1, "Operation not permitted", str(self))
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    try:
        c.submit_protobuf(_request(1))
        c.flush()
        assert c.health().status == "ok" and c.unwritten_spans == 0 and len(c._undeleted) == 1
        left = c._undeleted[0]
        assert left.exists()
        c.flush()  # the second refusal
        c.flush()
        assert not left.exists() and not c._undeleted
        assert c.stats.spans_written == 100
    finally:
        c.close()
    assert len(_stored_span_ids(tmp_path / "lake")) == 100


def test_a_log_write_that_does_not_return_makes_the_collector_unavailable(tmp_path, monkeypatch):
    """A hung disk (a frozen filesystem): requests used to queue behind the write while /health
    said ok."""
    import os

    from otel_assay.collect import receiver
    from otel_assay.collect.receiver import Collector, Overloaded

    monkeypatch.setattr(receiver, "STALL_S", 0.3)
    c = Collector(tmp_path / "lake", flush_seconds=3600)
    real_fsync = os.fsync
    release = threading.Event()

    def hung_fsync(fd):
        release.wait(30)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", hung_fsync)
    first = threading.Thread(target=c.submit_protobuf, args=(_request(1),))
    first.start()
    try:
        _wait_for(lambda: c.health().status == "unavailable", timeout=5, what="the stalled write is seen")
        assert "has not returned" in c.health().cause
        with pytest.raises(Overloaded, match="hung disk"):
            c.check_capacity()
    finally:
        release.set()
        first.join(30)
        monkeypatch.setattr(os, "fsync", real_fsync)
    assert c.health().status == "ok"
    c.close()
    assert len(_stored_span_ids(tmp_path / "lake")) == 100
