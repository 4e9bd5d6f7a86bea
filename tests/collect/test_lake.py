"""The lake itself: limits on hostile spans, paths, compaction while reading, corrupt files."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from otel_assay.analyze.engine import Engine
from otel_assay.lake import files as lake_module
from otel_assay.lake.files import Lake, LakeError
from otel_assay.lake.rows import SpanBatch, make_resource
from otel_assay.lake.schema import SPANS_SCHEMA, TRUNCATION_MARK, Limits

RES = make_resource([("service.name", "svc")])
T0 = 1_763_000_000_000_000_000


def add(batch, span_id="00000000000000a1", trace_id="0af7651916cd43dd8448eb211c80319c", **kw):
    args = dict(trace_id=trace_id, span_id=span_id, parent_span_id=None, name="s", kind=1,
                start_time_unix_nano=T0, end_time_unix_nano=T0 + 10, status_code=0, status_message=None,
                trace_state=None, scope_name="t", scope_version=None, resource=RES, attributes=[])
    args.update(kw)
    return batch.add_span(**args)


def all_rows(lake):
    files = Lake(lake).live_files()
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pylist() if files else []


def test_a_million_attributes_and_a_10mb_value_are_bounded(tmp_path):
    b = SpanBatch(Limits())
    attrs = [(f"k{i}", i) for i in range(1_000_000)] + [("big", "x" * (10 << 20))]
    assert add(b, attributes=attrs)
    Lake(tmp_path).write(b.tables())
    row = all_rows(tmp_path)[0]
    assert len(row["attributes"]) == 1024
    assert row["dropped_attributes_count"] == 1_000_001 - 1024
    b = SpanBatch(Limits())
    add(b, attributes=[("big", "x" * (10 << 20)), ("gen_ai.tool.name", "y" * (10 << 20))])
    Lake(tmp_path / "2").write(b.tables())
    row = all_rows(tmp_path / "2")[0]
    big = dict(row["attributes"])["big"]
    assert big.endswith(TRUNCATION_MARK) and len(big) == 256 * 1024 + len(TRUNCATION_MARK)
    assert row["tool_name"].endswith(TRUNCATION_MARK)


@pytest.mark.parametrize("kw, reason", [
    (dict(trace_id="abc"), "trace_id must be 16 bytes"),
    (dict(trace_id="0" * 32), "all zeros"),
    (dict(span_id="zz" * 8), "not hexadecimal"),
    # int(x, 16) takes these: a sign, whitespace, non-ASCII digits
    (dict(trace_id="+" + "a" * 31), "not hexadecimal"),
    (dict(span_id=" " + "a" * 15), "not hexadecimal"),
    (dict(parent_span_id="\u0663" * 16), "not hexadecimal"),
    (dict(parent_span_id="1234"), "parent_span_id must be 8 bytes"),
    (dict(start_time_unix_nano=-5), "start_time_unix_nano must be a positive int64"),
    (dict(start_time_unix_nano=1 << 64, end_time_unix_nano=1 << 64), "positive int64"),
    (dict(end_time_unix_nano=T0 - 1), "before start"),
    (dict(kind=9), "not a SpanKind"),
])
def test_invalid_spans_are_rejected_with_a_reason(kw, reason):
    b = SpanBatch()
    assert not add(b, **kw)
    assert b.rejected == 1 and reason in next(iter(b.reject_reasons))
    assert len(b) == 0


def test_hostile_values_never_become_paths(tmp_path):
    lake = tmp_path / "lake"
    b = SpanBatch()
    evil = "../../../../tmp/escape"
    add(b, name=evil, attributes=[("assay.scenario", evil), ("assay.run.id", "/etc"), ("x", "\x00\ud800")],
        scope_name=evil)
    Lake(lake).write(b.tables())
    written = sorted(p.relative_to(lake).as_posix() for p in lake.rglob("*") if p.is_file())
    assert len(written) == 1 and written[0].startswith("spans/dt=2025-11-13/part-")
    assert not (tmp_path / "tmp").exists()
    row = all_rows(lake)[0]
    assert row["scenario"] == evil and row["run_id"] == "/etc"
    with pytest.raises(ValueError):
        Lake(lake).write(b.tables(), token="../../x")


def test_spans_are_partitioned_by_start_day_with_their_events(tmp_path):
    b = SpanBatch()
    day = 86_400 * 10**9
    add(b, span_id="00000000000000a1", events=[(T0 + 5, "e1", [("k", 1)], 0)])
    add(b, span_id="00000000000000a2", start_time_unix_nano=T0 + day, end_time_unix_nano=T0 + day + 1,
        events=[(T0 + day, "e2", [], 0)])
    Lake(tmp_path).write(b.tables())
    assert sorted(p.name for p in (tmp_path / "spans").iterdir()) == ["dt=2025-11-13", "dt=2025-11-14"]
    assert sorted(p.name for p in (tmp_path / "span_events").iterdir()) == ["dt=2025-11-13", "dt=2025-11-14"]
    meta = pq.read_metadata(next((tmp_path / "spans").rglob("*.parquet")))
    assert meta.metadata[b"otel_assay.schema_version"] == b"1"
    assert meta.row_group(0).column(0).compression == "ZSTD"


def _random_span_rows(rng, n, *, resource):
    """Rows in every column's shape; `name` is unique, so a row split across columns shows.

    ``resource``: "one" for every row; "mixed" a random one of three; "odd_value" the same
    for all but one row near the end, which has another host and service (the writer may
    leave a column unsorted when it holds the same value in every row); "odd_widths" the
    same but for one row without attributes and one with them twice.
    """
    day = 86_400 * 10**9
    one = [("service.name", "svc"), ("host.name", "h1")]
    resources = [one, [("service.name", "svc")], []]
    rows = []
    for i in range(n):
        res = rng.choice(resources) if resource == "mixed" else one
        if resource == "odd_value" and i == n - 13:
            res = [("service.name", "svc"), ("host.name", "h2")]
        if resource == "odd_widths" and i in (n - 21, n - 20):
            res = [] if i == n - 21 else one + one
        row = {f.name: None for f in SPANS_SCHEMA}
        row.update(
            # few traces, ids and start times: ties on the first keys and whole-key duplicates
            trace_id=f"{rng.randrange(1, 40):032x}", span_id=f"{rng.randrange(1, 60):016x}",
            start_time_unix_nano=T0 + rng.randrange(5) + (day if rng.random() < 0.1 else 0),
            name=f"n{i}", kind=rng.randrange(6), duration_ns=rng.randrange(10**6), status_code=0,
            service_name="other" if res[-1:] == [("host.name", "h2")] else "svc",
            tool_name=rng.choice([None, "search", "refund"]), input_tokens=rng.choice([None, 7, 100 + i]),
            dropped_attributes_count=0, resource_attributes=res,
            attributes=rng.choice([None, [], [("k", "v")], [("a", str(i)), ("b", None)],
                                   [("x", "y"), ("z", str(i))]]),
        )
        rows.append(row)
    return rows


@pytest.mark.parametrize("resource", ["one", "mixed", "odd_value", "odd_widths"])
@pytest.mark.parametrize("cuts", [[3, 700, 701, 1600, 1989], [3, 1989]], ids=["chunks", "slice"])
@pytest.mark.parametrize("presorted", ["no", "yes", "trace_only"])
def test_write_keeps_every_row_whole_in_sort_order(tmp_path, monkeypatch, resource, cuts, presorted):
    """Sliced or chunked input with null and empty maps comes back sorted, each row intact."""
    # the chunked input also takes the threaded path, the sliced one the inline path
    monkeypatch.setattr(lake_module, "_PARALLEL_ROWS", 0 if len(cuts) > 2 else 1 << 40)
    rows = _random_span_rows(random.Random(5), 2000, resource=resource)
    key = lambda r: (r["trace_id"], r["start_time_unix_nano"], r["span_id"])  # noqa: E731
    if presorted != "no":  # one day, in order or in trace order only: the writer may skip the sort
        rows = sorted((r for r in rows if r["start_time_unix_nano"] < T0 + 10),
                      key=key if presorted == "yes" else lambda r: r["trace_id"])
    whole = pa.Table.from_pylist(rows, schema=SPANS_SCHEMA)
    # slices of one table: offsets (of the maps' entries too) that do not start at zero
    cuts = [min(c, len(rows) - 11) for c in cuts]
    table = pa.concat_tables([whole.slice(a, b - a) for a, b in zip(cuts, cuts[1:])])
    assert table.column("attributes").num_chunks == len(cuts) - 1
    sent = table.to_pylist()
    Lake(tmp_path).write({"spans": table}, token="t")
    got = {p.parent.name: pq.read_table(p).to_pylist() for p in (tmp_path / "spans").glob("dt=*/*.parquet")}
    day = lambda r: "dt=2025-11-13" if r["start_time_unix_nano"] < T0 + 10 else "dt=2025-11-14"  # noqa: E731
    want: dict[str, list] = {}
    for r in sorted(sent, key=key):  # stable, as the writer's sort: duplicates keep their order
        want.setdefault(day(r), []).append(r)
    assert sorted(got) == sorted(want) and len(want) == (2 if presorted == "no" else 1)
    for dt in want:
        assert got[dt] == want[dt], dt


def test_a_large_write_is_split_into_files_of_whole_traces(tmp_path, monkeypatch):
    """Past FILE_ROWS rows a partition becomes several files, each of whole traces, in
    order; the same rows, however chunked, give the same bytes (WAL replay is idempotent)."""
    monkeypatch.setattr(lake_module, "FILE_ROWS", 300)
    rows = _random_span_rows(random.Random(9), 2000, resource="mixed")
    for r in rows[:700]:  # one trace longer than a file: it stays whole
        r["trace_id"] = f"{41:032x}"
    table = pa.Table.from_pylist(rows, schema=SPANS_SCHEMA)
    Lake(tmp_path / "a").write({"spans": table}, token="t")
    Lake(tmp_path / "b").write({"spans": pa.concat_tables([table.slice(0, 999), table.slice(999)])}, token="t")
    key = lambda r: (r["trace_id"], r["start_time_unix_nano"], r["span_id"])  # noqa: E731
    for dt in ("dt=2025-11-13", "dt=2025-11-14"):
        files = sorted((tmp_path / "a" / "spans" / dt).glob("*.parquet"))
        want = sorted((r for r in table.to_pylist() if _dt(r) == dt), key=key)
        if len(want) <= 300:
            assert [f.name for f in files] == ["part-t.parquet"]
        else:
            n = len(files)
            assert n >= 2 and sorted(f.name for f in files) == sorted(f"part-t-{i}of{n}.parquet" for i in range(1, n + 1))
        files.sort(key=lambda f: int(f.stem.rsplit("-", 1)[1].split("of")[0]) if "of" in f.stem else 0)
        got = [pq.read_table(f).to_pylist() for f in files]
        assert [r for part in got for r in part] == want
        traces = [{r["trace_id"] for r in part} for part in got]
        assert sum(map(len, traces)) == len(set().union(*traces)), "a trace was split across files"
        for f in files:
            assert f.read_bytes() == (tmp_path / "b" / "spans" / dt / f.name).read_bytes()
    assert len(Lake(tmp_path / "a").live_files()) == len(list((tmp_path / "a" / "spans").rglob("*.parquet")))


@pytest.mark.parametrize("parallel", [True, False])
def test_a_failed_write_leaves_no_files_and_a_retry_stores_each_row_once(tmp_path, monkeypatch, parallel):
    """One file of a split write fails (disk full): the files already written go again, so
    the exporter's retry under a new name does not store their rows twice."""
    monkeypatch.setattr(lake_module, "FILE_ROWS", 300)
    monkeypatch.setattr(lake_module, "_PARALLEL_ROWS", 0 if parallel else 1 << 40)
    table = pa.Table.from_pylist(_random_span_rows(random.Random(4), 2000, resource="one"), schema=SPANS_SCHEMA)
    real = lake_module.write_parquet_atomic

    def disk_full_once(rows, path, fsync=True):
        if "-3of" in path.name and not failed:
            failed.append(path)
            raise OSError(28, "No space left on device")
        return real(rows, path, fsync=fsync)

    failed: list = []
    monkeypatch.setattr(lake_module, "write_parquet_atomic", disk_full_once)
    lake = Lake(tmp_path)
    with pytest.raises(OSError, match="No space"):
        lake.write({"spans": table})
    assert failed and not list(tmp_path.rglob("*.parquet"))
    lake.write({"spans": table})
    assert len(lake.live_files()) > 2
    assert sorted(map(str, all_rows(tmp_path))) == sorted(map(str, table.to_pylist()))
    # with a caller's token (WAL replay, re-import) the names may hold an earlier write of
    # the same rows: a failed rewrite must not remove them
    named = tmp_path / "named"
    Lake(named).write({"spans": table}, token="import-x-00000")
    failed.clear()
    with pytest.raises(OSError, match="No space"):
        Lake(named).write({"spans": table}, token="import-x-00000")
    assert sorted(map(str, all_rows(named))) == sorted(map(str, table.to_pylist()))


def _dt(row) -> str:
    return "dt=2025-11-13" if row["start_time_unix_nano"] < T0 + 10 else "dt=2025-11-14"


def _write_files(lake, n_files, per_file, dup_every=0):
    for f in range(n_files):
        b = SpanBatch()
        for i in range(per_file):
            sid = f"{f * per_file + i + 1:016x}"
            add(b, span_id=sid, trace_id=f"{(f * per_file + i) % 50 + 1:032x}")
            if dup_every and i % dup_every == 0:  # a retransmitted span in a later file
                add(b, span_id=f"{1:016x}", trace_id=f"{1:032x}")
        Lake(lake).write(b.tables())


def test_compaction_merges_dedupes_and_readers_never_see_a_row_twice(tmp_path):
    lake = tmp_path / "lake"
    _write_files(lake, 40, 500, dup_every=100)
    distinct = duckdb.connect().execute("SELECT count(DISTINCT (trace_id, span_id)) FROM read_parquet(?)",
                              [[str(f) for f in Lake(lake).live_files()]]).fetchone()[0]
    assert distinct == 40 * 500
    counts, errors = [], []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                files = Lake(lake).live_files()
                con = duckdb.connect()
                n, total = con.execute("SELECT count(*), "
                                       "count(DISTINCT (trace_id, span_id)) FROM read_parquet(?)",
                                       [[str(f) for f in files]]).fetchone()
                con.close()
                counts.append((n, total))
            except Exception as e:  # a vanished file would show up here
                errors.append(e)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        r = Lake(lake).compact(grace_seconds=30)
    finally:  # a failing compaction must not leave the reader running (pytest would hang at exit)
        stop.set()
        t.join(timeout=30)
    assert not errors, errors[:1]
    rows_before = 40 * 500 + 40 * 5
    # every listing saw the old files or the merged one, never both (which would count rows twice)
    assert counts and all(total == distinct and n in (rows_before, distinct) for n, total in counts)
    assert r.files_in == 40 and r.files_out == 1 and r.rows_out == distinct
    files = Lake(lake).live_files()
    assert len(files) == 1 and pq.read_metadata(files[0]).num_rows == distinct
    # the replaced files stay for the grace period, then go
    assert len(list((lake / "spans").rglob("*.parquet"))) == 41
    assert Lake(lake).compact(grace_seconds=0).deleted_files == 40
    assert len(list((lake / "spans").rglob("*.parquet"))) == 1


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "otel_assay", *map(str, args)], capture_output=True, text=True, timeout=120)


def _count(lake):
    files = [str(f) for f in Lake(lake).live_files()]
    # a connection per call: the readers run in threads, and DuckDB's shared default
    # connection holds one pending result at a time
    return duckdb.connect().execute("SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM read_parquet(?)", [files]).fetchone()


def test_compacting_a_missing_lake_says_how_to_name_it(tmp_path):
    # `otel-assay compact` without --dir looks at ./traces; the error must say how to point it
    r = subprocess.run([sys.executable, "-m", "otel_assay", "compact"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "OTEL_ASSAY_DIR"})
    assert r.returncode == 4, r.stderr
    assert "lake directory traces does not exist" in r.stderr and "--dir" in r.stderr, r.stderr


def test_compaction_keeps_to_the_memory_limit_and_spills_to_the_temp_directory(tmp_path, monkeypatch):
    import tempfile
    from pathlib import Path

    lake = tmp_path / "lake"
    for i in range(2):
        b = SpanBatch()
        add(b, span_id=f"{i + 1:016x}")
        Lake(lake).write(b.tables())
    r = subprocess.run([sys.executable, "-m", "otel_assay", "compact", "--dir", lake, "--grace-seconds", "0"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "OTEL_ASSAY_MEMORY_LIMIT": "lots"})
    assert r.returncode == 3 and "OTEL_ASSAY_MEMORY_LIMIT='lots'" in r.stderr, r.stderr
    assert len(Lake(lake).live_files()) == 2
    monkeypatch.setenv("OTEL_ASSAY_MEMORY_LIMIT", "64MB")
    temp, limit = lake_module.duckdb_connect().execute(
        "SELECT current_setting('temp_directory'), current_setting('memory_limit')").fetchone()
    # DuckDB's default for an in-memory database is ./.tmp: the CI checkout the command runs in
    assert Path(temp).parent == Path(tempfile.gettempdir()) and limit == "61.0 MiB"
    assert lake_module.Lake(lake).compact(grace_seconds=0).files_out == 1


def test_a_second_compaction_while_one_runs_is_refused(tmp_path, monkeypatch):
    # two compactions that merged the same files each published a merged copy: every row twice
    lake = tmp_path / "lake"
    _write_files(lake, 4, 50)
    started, release = threading.Event(), threading.Event()
    merge = Lake._compact_group

    def held(self, *args):  # the first compaction, stopped in the middle of its work
        started.set()
        release.wait(60)
        return merge(self, *args)

    monkeypatch.setattr(Lake, "_compact_group", held)
    results = []
    t = threading.Thread(target=lambda: results.append(Lake(lake).compact(grace_seconds=0)))
    t.start()
    try:
        assert started.wait(60)
        r = run_cli("compact", "--dir", lake, "--grace-seconds", "0")
    finally:
        release.set()
        t.join(60)
    assert r.returncode == 3 and "another otel-assay compact is running" in r.stderr, r.stderr
    assert results and results[0].files_in == 4
    assert _count(lake) == (200, 200)
    assert run_cli("compact", "--dir", lake).returncode == 0  # the lock went with the first one


def test_a_compaction_killed_midway_loses_nothing_and_the_next_removes_its_leftovers(tmp_path):
    lake = tmp_path / "lake"
    _write_files(lake, 3, 20)
    before = sorted(Lake(lake).live_files())
    # SIGKILL at the rename that publishes the compaction record: the merged copy is written
    # under its temporary name, the record is not published
    code = ("import os, signal, sys\n"
            "from otel_assay.lake import files as m\n"
            "real, n = os.replace, [0]\n"
            "def replace(a, b):\n"
            "    n[0] += 1\n"
            "    if n[0] == 2: os.kill(os.getpid(), signal.SIGKILL)\n"
            "    return real(a, b)\n"
            "m.os.replace = replace\n"
            "m.Lake(sys.argv[1]).compact(grace_seconds=0)\n")
    r = subprocess.run([sys.executable, "-c", code, str(lake)], capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stderr
    leftovers = [p for p in lake.rglob(".*") if p.is_file()]
    assert any(p.name.startswith(".part-compact-") for p in leftovers), leftovers
    assert sorted(Lake(lake).live_files()) == before and _count(lake) == (60, 60)
    r = run_cli("compact", "--dir", lake, "--grace-seconds", "0")
    assert r.returncode == 0, r.stderr
    assert [p for p in lake.rglob(".*") if p.is_file()] == []
    assert len(Lake(lake).live_files()) == 1 and _count(lake) == (60, 60)


def test_compact_refuses_a_directory_that_is_not_a_lake(tmp_path):
    lake = tmp_path / "lake"
    _write_files(lake, 2, 5)
    for wrong in (lake / "spans", tmp_path / "elsewhere"):
        wrong.mkdir(exist_ok=True)
        before = sorted(wrong.rglob("*"))
        r = run_cli("compact", "--dir", wrong)
        assert r.returncode == 4 and "is not a span lake" in r.stderr and "Traceback" not in r.stderr
        assert sorted(wrong.rglob("*")) == before  # no spans/, span_events/, ... made in it


def test_files_of_an_older_schema_are_read_and_compacted(tmp_path):
    # files that lack columns the views and compaction name (an older schema version, another
    # writer): union_by_name fills a column only when some other file has it
    lake = tmp_path / "lake"
    _write_files(lake, 2, 10)
    for f in Lake(lake).live_files():
        t = pq.read_table(f)
        pq.write_table(t.drop_columns(["trace_state", "error_class", "score", "duration_ns", "attributes"]), f)
    r = run_cli("sql", lake, "SELECT count(*) AS n, count(duration_ns) AS d FROM trials", "--format", "csv")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.splitlines()[1] == "20,0"  # 20 traces; no duration without duration_ns
    r = run_cli("compact", "--dir", lake, "--grace-seconds", "0")
    assert r.returncode == 0, r.stderr
    (merged,) = Lake(lake).live_files()
    assert pq.read_schema(merged).names == SPANS_SCHEMA.names and _count(lake) == (20, 20)


@pytest.mark.parametrize("change", ["reorder", "drop"])
def test_files_of_several_layouts_are_read_by_column_name(tmp_path, change):
    # a lake whose files all have one layout is bound by the first file's schema (fast to
    # open); a file with fewer columns must switch to unifying by name (DuckDB refuses the
    # file otherwise), and one with the same columns in another order must read right too
    lake = tmp_path / "lake"
    for f in range(2):
        b = SpanBatch()
        for i in range(10):
            add(b, span_id=f"{f * 10 + i + 1:016x}", end_time_unix_nano=T0 + 1000 * f + i, status_code=f)
        Lake(lake).write(b.tables())
    second = next(p for p in Lake(lake).live_files() if pq.read_table(p).column("status_code")[0].as_py() == 1)
    t = pq.read_table(second)
    t = t.select(list(reversed(t.column_names))) if change == "reorder" else t.drop_columns(["trace_state", "error_class"])
    pq.write_table(t, second)
    r = run_cli("sql", lake, "SELECT status_code, count(*) AS n, min(duration_ns) AS lo, max(duration_ns) AS hi, "
                "count(trace_state) AS ts FROM spans GROUP BY 1 ORDER BY 1", "--format", "csv")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.splitlines()[1:] == ["0,10,0,9,0", "1,10,1000,1009,0"], r.stdout


def test_corrupt_and_foreign_parquet_in_the_lake(tmp_path):
    lake = tmp_path / "lake"
    _write_files(lake, 2, 10)
    part = next((lake / "spans").iterdir())
    (part / "part-corrupt.parquet").write_bytes(b"PAR1 this is not parquet")
    pq.write_table(pa.table({"city": ["Oslo"]}), part / "part-foreign.parquet")
    r = run_cli("sql", lake, "SELECT count(*) FROM spans")
    assert r.returncode == 4 and "part-corrupt.parquet: not a readable Parquet file" in r.stderr
    assert "part-foreign.parquet: not an otel-assay spans file" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("compact", "--dir", lake)
    assert r.returncode == 4 and "skipped" in r.stderr
    with pytest.raises(LakeError):
        Engine(lake)
    # the good files were compacted and nothing was lost
    (part / "part-corrupt.parquet").unlink()
    (part / "part-foreign.parquet").unlink()
    r = run_cli("sql", lake, "SELECT count(*) AS n FROM spans", "--format", "csv")
    assert r.returncode == 0 and r.stdout.splitlines()[1] == "20"


def _corrupt_pages(path):
    """Overwrite a Parquet file's data pages, keeping its footer (so the open-time check passes)."""
    data = bytearray(path.read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    data[4:footer] = random.Random(1).randbytes(footer - 4)
    path.write_bytes(bytes(data))


def test_corrupt_data_pages_give_exit_4_and_compaction_merges_the_rest(tmp_path):
    lake = tmp_path / "lake"
    _write_files(lake, 3, 10)
    bad = sorted((lake / "spans").rglob("*.parquet"))[1]
    _corrupt_pages(bad)
    assert Engine(lake).files  # the footer still reads: only reading the rows fails
    for args in (["gate", lake, "-q"], ["sql", lake, "SELECT max(name) FROM spans"], ["sql", lake, "FROM trials"]):
        r = run_cli(*args)
        assert r.returncode == 4, (args, r.stderr)
        assert "Traceback" not in r.stderr and "names the unreadable files" in r.stderr, r.stderr
    r = run_cli("compact", "--dir", lake, "--grace-seconds", "0")
    assert r.returncode == 4 and f"skipped {bad}: unreadable data" in r.stderr, r.stderr
    live = Lake(lake).live_files()
    assert len(live) == 2 and bad in live and any(p.name.startswith("part-compact-") for p in live)


def test_sql_command_formats_and_errors(tmp_path):
    lake = tmp_path / "lake"
    _write_files(lake, 1, 3)
    r = run_cli("sql", lake, "SELECT span_id, attributes FROM spans ORDER BY span_id", "--format", "json")
    assert r.returncode == 0
    import json
    assert json.loads(r.stdout)[0] == {"span_id": "0000000000000001", "attributes": {}}
    assert run_cli("sql", lake, "DROP VIEW spans").returncode == 3
    r = run_cli("sql", lake, "selec 1")
    assert r.returncode == 3 and "starts with 'selec'" in r.stderr
    assert run_cli("sql", lake, "SELECT nonsense FROM spans").returncode == 3
    assert run_cli("sql", lake, "SELECT * FROM read_csv('/etc/passwd')").returncode == 3
    assert run_cli("sql", lake, "SELECT 1", "--format", "xml").returncode == 3
    r = run_cli("sql", lake, "SELECT 1; SELECT 2")
    assert r.returncode == 3 and "give one query, not 2" in r.stderr
    assert run_cli("sql", tmp_path / "missing", "SELECT 1").returncode == 4
    empty = tmp_path / "empty"
    (empty / "spans").mkdir(parents=True)
    r = run_cli("sql", empty, "SELECT count(*) AS n FROM spans", "--format", "csv")
    assert r.returncode == 0 and r.stdout.splitlines()[1] == "0"


def test_collect_refuses_non_loopback_without_token_and_bad_addresses(tmp_path):
    r = run_cli("collect", "--dir", tmp_path, "--http", "0.0.0.0:0", "--grpc", "off")
    assert r.returncode == 3 and "needs a bearer token" in r.stderr
    r = run_cli("collect", "--dir", tmp_path, "--http", "127.0.0.1:notaport")
    assert r.returncode == 3 and "--http" in r.stderr
    r = run_cli("collect", "--dir", tmp_path, "--grpc", "off", "--http", "off")
    assert r.returncode == 3
    not_pem = tmp_path / "cert.pem"
    not_pem.write_text("grpc: on\n")
    r = run_cli("collect", "--dir", tmp_path, "--tls-cert", not_pem, "--tls-key", not_pem, "--http", "off")
    assert r.returncode == 3 and "cannot load them" in r.stderr and "free port" not in r.stderr, r.stderr


def test_compaction_keeps_events_that_share_a_name_and_time_and_drops_only_copies(tmp_path):
    # n choices stamped at once differ only in their attributes: compaction merged them into
    # one (and called the rest duplicates); a retransmitted copy must still go
    lake = tmp_path / "lake"
    events = [(T0, "gen_ai.choice", [("index", i)], 0) for i in range(3)]
    links = [("0af7651916cd43dd8448eb211c80319c", "00000000000000b1", None, [("n", i)], 0) for i in range(2)]
    for copies in (1, 2):  # the second file holds the same span again (a retransmission)
        b = SpanBatch()
        for _ in range(copies):
            add(b, events=events, links=links)
        Lake(lake).write(b.tables())
    Lake(lake).compact(grace_seconds=0)
    ev = pa.concat_tables([pq.read_table(f) for f in Lake(lake).live_files("span_events")])
    assert sorted(dict(a)["index"] for a in ev.column("attributes").to_pylist()) == ["0", "1", "2"]
    ln = pa.concat_tables([pq.read_table(f) for f in Lake(lake).live_files("span_links")])
    assert sorted(dict(a)["n"] for a in ln.column("attributes").to_pylist()) == ["0", "1"]


# named ids: an id spelt from the 400 kB record goes into PYTEST_CURRENT_TEST, which older
# pytest versions set, and no subprocess can start with an environment variable that long
@pytest.mark.parametrize("record", [b"[" * 200_000 + b"]" * 200_000, b"[]", b'"a string"'],
                         ids=["nested-too-deep", "list", "string"])
def test_a_compaction_record_of_another_shape_is_ignored(tmp_path, record):
    """A record in _compaction/ that is not a compaction's (nested past a JSON parser's
    depth, a list, a string) is skipped like a damaged one, not a traceback in every command."""
    lake = tmp_path / "lake"
    _write_files(lake, 2, 10)
    (lake / "_compaction").mkdir(exist_ok=True)
    (lake / "_compaction" / "x.json").write_bytes(record)
    for args in (["sql", lake, "SELECT count(*) AS n FROM spans", "--format", "csv"],
                 ["compact", "--dir", lake, "--grace-seconds", "0"]):
        r = run_cli(*args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr)
    assert _count(lake) == (20, 20)


def test_a_span_file_whose_name_is_not_utf8_is_named_by_compaction(tmp_path):
    lake = tmp_path / "lake"
    _write_files(lake, 2, 10)
    first = sorted((lake / "spans").rglob("*.parquet"))[0]
    odd = os.path.join(os.fsencode(first.parent), b"part-\xff.parquet")
    os.rename(first, odd)
    r = run_cli("compact", "--dir", lake, "--grace-seconds", "0")
    assert r.returncode == 4 and "Traceback" not in r.stderr and "part-" in r.stderr, r.stderr


def test_duckdb_spills_into_a_private_directory_not_a_planted_one(tmp_path, monkeypatch):
    """DuckDB's temp directory was /tmp/otel-assay-duckdb-<pid>: a name anyone can guess. A
    symlink planted there sent `sql` through it to any file, and a directory made there by
    another user received spill files of lake data. It is now made with mkdtemp (mode 0700,
    a name nobody can predict, never an existing path) and removed when the process exits."""
    import stat
    import tempfile

    planted_target = tmp_path / "someone-elses"
    planted_target.mkdir()
    old = Path(tempfile.gettempdir()) / f"otel-assay-duckdb-{os.getpid()}"
    if not old.exists() and not old.is_symlink():
        old.symlink_to(planted_target)
    try:
        con = lake_module.duckdb_connect(memory_limit="32MB")
        con.execute("SET threads = 1; SET preserve_insertion_order = false")
        temp = Path(con.execute("SELECT current_setting('temp_directory')").fetchone()[0])
        # a sort of ~100 MB under a 32 MB limit spills
        n = con.execute("SELECT count(*) FROM (SELECT i, md5(i::VARCHAR) AS h FROM range(2000000) t(i) "
                        "ORDER BY h)").fetchone()[0]
        assert n == 2_000_000
        assert temp != old and not temp.is_symlink() and temp.parent == Path(tempfile.gettempdir())
        assert stat.S_IMODE(temp.lstat().st_mode) == 0o700
        assert list(planted_target.iterdir()) == []
        con.close()
    finally:
        if old.is_symlink():
            old.unlink()
    # removed when the process that made it exits
    code = ("from otel_assay.lake import files\n"
            "con = files.duckdb_connect()\n"
            "print(con.execute(\"SELECT current_setting('temp_directory')\").fetchone()[0])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    made = Path(r.stdout.strip())
    assert made.name.startswith("otel-assay-duckdb-") and not made.exists() and not made.is_symlink()
