"""The lake's file inventory (LAKE/_inventory.json): an open reads only the footers of the
files it has not seen, and never answers for a file that changed, or from a stale set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pyarrow.parquet as pq
import pytest

from otel_assay.analyze.engine import Engine
from otel_assay.analyze.stepwrite import write_step_files
from otel_assay.cli import main
from otel_assay.lake import inventory
from otel_assay.lake.files import Lake, LakeError
from otel_assay.lake.inventory import INVENTORY_FILE

from .lakes import span, write_lake


def _trial(n: int) -> list[dict]:
    attrs = {"assay.scenario": "s", "assay.agent.version": "v1"}
    return [span(n, n * 10 + 1, None, "assay.trial s", n, n + 1, attrs),
            span(n, n * 10 + 2, n * 10 + 1, "chat m", n + 0.1, n + 0.5,
                 {**attrs, "gen_ai.operation.name": "chat", "gen_ai.request.model": "m"})]


@pytest.fixture
def lake(tmp_path):
    root = tmp_path / "lake"
    for n in range(1, 5):
        write_lake(root, _trial(n))
    return root


@pytest.fixture
def footers(monkeypatch):
    """How many files the inventory had to read (a count, the reading itself unchanged)."""
    read = []
    real = inventory.inspect_lake_file
    monkeypatch.setattr(inventory, "inspect_lake_file", lambda p, t: read.append(p) or real(p, t))
    return read


def _trials(lake) -> list[tuple]:
    with Engine(lake) as eng:
        eng.materialize()
        return eng.rows("SELECT trace_id, version, n_steps FROM trials ORDER BY trace_id")


def _entries(lake) -> dict:
    return json.loads((lake / INVENTORY_FILE).read_text())["files"]


def test_a_second_open_reads_no_footer(lake, footers):
    first = _trials(lake)
    assert len(first) == 4 and len(footers) == 4
    assert sorted(_entries(lake)) == sorted(f"spans/{p.parent.name}/{p.name}" for p in Lake(lake).live_files())
    footers.clear()
    assert _trials(lake) == first
    assert footers == []


def test_files_added_and_compacted_are_seen(lake, footers):
    _trials(lake)
    write_lake(lake, _trial(5))
    footers.clear()
    assert len(_trials(lake)) == 5
    assert len(footers) == 1  # the new file only
    Lake(lake).compact(grace_seconds=0)
    live = Lake(lake).live_files()
    assert len(live) == 1
    assert len(_trials(lake)) == 5
    # the merged files' entries are gone with them
    assert sorted(_entries(lake)) == [f"spans/{live[0].parent.name}/{live[0].name}"]


def test_a_file_changed_in_place_is_read_again(lake):
    """Same size, same modification time: its change time still tells, and the damage is
    reported as it is without an inventory."""
    _trials(lake)
    victim = Lake(lake).live_files()[0]
    st = os.stat(victim)
    data = bytearray(victim.read_bytes())
    data[-8:] = b"\0" * 8  # the footer's length and magic
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(victim).st_size == st.st_size and os.stat(victim).st_mtime_ns == st.st_mtime_ns
    with pytest.raises(LakeError) as with_inventory:
        Engine(lake)
    (lake / INVENTORY_FILE).unlink()
    with pytest.raises(LakeError) as without:
        Engine(lake)
    assert str(with_inventory.value) == str(without.value)
    assert f"{victim}: not a readable Parquet file" in str(without.value)


@pytest.mark.parametrize("content", [
    "not json", "[]", '{"format": 1, "files": []}', '{"format": 2, "files": {}}',
    '{"format": 1, "files": {"spans/x": [[1, 2, 3], "a", 4]}}', "[" * 100_000,
])
def test_a_damaged_inventory_is_ignored_and_replaced(lake, footers, content):
    want = _trials(lake)
    (lake / INVENTORY_FILE).write_text(content)
    footers.clear()
    assert _trials(lake) == want
    assert len(footers) == 4
    assert len(_entries(lake)) == 4


def test_an_inventory_that_cannot_be_written_only_costs_time(lake, footers):
    (lake / INVENTORY_FILE).mkdir()  # neither readable nor replaceable as a file
    want = _trials(lake)
    assert len(want) == 4 and len(footers) == 4
    assert _trials(lake) == want
    assert not [p for p in lake.iterdir() if p.name.endswith(".tmp")]


def test_a_stale_entry_for_a_file_replaced_under_its_name(lake):
    """A file written again under the same name (a WAL replay) is a new file: the entry of
    the old one is not used, whatever it said."""
    _trials(lake)
    victim = Lake(lake).live_files()[0]
    table = pq.read_table(victim)
    tmp = victim.with_name(".replaced.tmp")
    pq.write_table(table.drop_columns(["trace_id"]), tmp)
    os.replace(tmp, victim)
    with pytest.raises(LakeError, match="missing columns: trace_id"):
        Engine(lake)


def test_writers_at_work_never_show_a_stale_set(lake):
    """While a writer adds files and readers rewrite the inventory, each open reads exactly
    the files it listed, and never fewer trials than an open before it."""
    stop = threading.Event()
    errors = []

    def writer():
        n = 100
        try:
            while not stop.is_set() and n < 140:
                write_lake(lake, _trial(n))
                n += 1
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader():
        try:
            while not stop.is_set():
                Engine(lake).close()
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    seen = 0
    try:
        for _ in range(15):
            with Engine(lake) as eng:
                eng.materialize()
                n = eng.rows("SELECT count(*) FROM trials")[0][0]
                listed = {r for p in eng.files["spans"] for r in pq.read_table(p, columns=["trace_id"])
                          .column("trace_id").to_pylist()}
            assert n == len(listed) >= seen
            seen = n
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    _trials(lake)  # brings the inventory up to date
    assert sorted(_entries(lake)) == sorted(f"spans/{p.parent.name}/{p.name}" for p in Lake(lake).live_files())


def test_opening_part_of_the_lake_keeps_the_inventory_of_the_rest(lake, footers):
    """One file, a glob of some days, or the span file that writing its step file opens:
    none of them lists the whole lake, so none uses or rewrites the inventory."""
    _trials(lake)
    whole = _entries(lake)
    one = Lake(lake).live_files()[0]
    footers.clear()
    with Engine(one) as eng:
        eng.materialize()
    with Engine(str(lake / "spans" / "dt=*" / "*.parquet")) as eng:
        assert len(eng.files["spans"]) == 4
    assert len(footers) == 1 + 4  # read, not answered from the inventory
    write_step_files(lake)  # what compact does after merging
    assert _entries(lake) == whole
    footers.clear()
    _trials(lake)
    assert footers == []


@pytest.mark.parametrize("command", [["sql", "SELECT count(*) FROM spans"], ["trials"]])
def test_a_read_only_command_on_a_file_writes_nothing(lake, tmp_path, capsys, command):
    """A span file copied into a folder that is no lake, under spans/dt=.../: reading it
    leaves nothing beside it."""
    src = Lake(lake).live_files()[0]
    home = tmp_path / "home"
    copy = home / "spans" / src.parent.name / src.name
    copy.parent.mkdir(parents=True)
    copy.write_bytes(src.read_bytes())
    args = [command[0], str(copy), *command[1:], "--format", "csv"]
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 0, capsys.readouterr().err
    assert len(capsys.readouterr().out.strip().splitlines()) == 2  # a header and one row: 2 spans, 1 trial
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == [
        copy.parent.parent.relative_to(home), copy.parent.relative_to(home), copy.relative_to(home)]


def _fifo(path):
    os.mkfifo(path)


def _dev_zero(path):
    path.symlink_to("/dev/zero")


def _huge(path):
    with open(path, "wb") as f:  # sparse: over the cap without taking the disk
        f.truncate(1 << 30)


@pytest.mark.parametrize("make", [_fifo, _dev_zero, _huge])
def test_an_inventory_that_is_no_regular_file_of_its_size_is_ignored(lake, make):
    """A FIFO blocked every analysis forever; a link to /dev/zero or a huge file read until
    memory ran out. Each is ignored (and replaced) like a damaged inventory."""
    make(lake / INVENTORY_FILE)
    p = subprocess.run(["bash", "-c", 'ulimit -v 3000000; exec "$@"', "-", sys.executable, "-m", "otel_assay",
                        "trials", str(lake), "--format", "csv"],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-400:]
    assert len(p.stdout.strip().splitlines()) == 1 + 4
    assert (lake / INVENTORY_FILE).is_file() and not (lake / INVENTORY_FILE).is_symlink()
    assert len(_entries(lake)) == 4


def test_an_interrupted_inventory_write_leaves_no_temporary_file(lake, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(inventory.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Engine(lake)
    monkeypatch.undo()
    assert not [p for p in lake.iterdir() if p.name.endswith(".tmp")]
    assert not (lake / INVENTORY_FILE).exists()
