"""`import` of several files by a pool of processes: the same lake, reports and ledger as one
process reading them in order."""

from __future__ import annotations

import gzip
import os
import json
import subprocess
import sys

import pytest

from otel_assay.collect import importer
from otel_assay.collect.importer import import_files

from .conftest import expected_view, lake_view, recorded_trials
from .test_import import jsonl, length_prefixed


def _lake_bytes(lake):
    return {str(p.relative_to(lake)): p.read_bytes() for p in sorted(lake.rglob("*.parquet"))}


def _ledger(lake):
    return sorted(p.name for p in (lake / "_imports").glob("*.json"))


def test_a_pool_of_processes_writes_the_lake_one_process_writes(tmp_path, monkeypatch):
    spans = recorded_trials(12)
    files = {
        "a.jsonl": jsonl(spans[:20]),
        "b.binpb": length_prefixed(spans[20:40]),
        "c.jsonl.gz": gzip.compress(jsonl(spans[40:60])),
        "bad.jsonl": jsonl(spans[60:70]) + b"{not json\n",  # one bad line: an error, the rest imported
        "copy-of-a.jsonl": jsonl(spans[:20]),  # the same content: skipped as imported before
        "text.log": b"2026-01-01 INFO started\n",  # nothing imported: an error, no ledger entry
        "d.jsonl": jsonl(spans[70:]),
    }
    paths = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    paths.append(tmp_path / "gone.jsonl")  # cannot be read
    serial = import_files(paths, tmp_path / "serial")
    monkeypatch.setattr(importer, "BYTES_PER_WORKER", 1)  # a worker per file, however small
    pooled = import_files(paths, tmp_path / "pooled", jobs=3)
    assert [f.path for f in pooled.files] == [str(p) for p in paths]  # the inputs' order
    for a, b in zip(serial.files, pooled.files):
        assert bool(a.already_imported) == bool(b.already_imported)  # the ledger's path names the lake
        a.already_imported = b.already_imported = a.already_imported and "the ledger"
        assert a == b
    assert pooled.files[4].already_imported == "the ledger" and pooled.files[-1].errors and not pooled.ok
    assert _lake_bytes(tmp_path / "pooled") == _lake_bytes(tmp_path / "serial")
    assert _ledger(tmp_path / "pooled") == _ledger(tmp_path / "serial") and len(_ledger(tmp_path / "serial")) == 5
    assert lake_view(tmp_path / "pooled") == expected_view(spans)
    # importing again is a no-op, in a pool as in one process
    again = import_files(paths, tmp_path / "pooled", jobs=3)
    assert [f.spans_imported for f in again.files] == [0] * len(paths)
    assert _lake_bytes(tmp_path / "pooled") == _lake_bytes(tmp_path / "serial")


def test_progress_reaches_the_parent_from_every_worker(tmp_path, monkeypatch):
    spans = recorded_trials(6)
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i}.jsonl")
        paths[-1].write_bytes(jsonl(spans[i * 10:(i + 1) * 10]))
    monkeypatch.setattr(importer, "BYTES_PER_WORKER", 1)
    told = [0, 0]

    def progress(nbytes, nspans):
        told[0] += nbytes
        told[1] += nspans

    result = import_files(paths, tmp_path / "lake", jobs=2, progress=progress)
    assert result.ok and told == [sum(p.stat().st_size for p in paths), 30]


def test_the_cli_takes_jobs_and_quiet_and_prints_progress_lines_without_a_terminal(tmp_path, monkeypatch, capsys):
    from otel_assay.cli.lake import _ProgressLines

    spans = recorded_trials(4)
    f = tmp_path / "t.jsonl"
    f.write_bytes(jsonl(spans))
    r = subprocess.run([sys.executable, "-m", "otel_assay", "import", f, "--dir", tmp_path / "lake", "--jobs", "2",
                        "-q"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and f"imported {len(spans)} spans" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "otel_assay", "import", f, "--dir", tmp_path / "lake", "--jobs", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "--jobs" in r.stderr
    monkeypatch.setattr(_ProgressLines, "EVERY", 0.0)
    lines = _ProgressLines(4 << 20)
    lines(2 << 20, 1000)
    assert "importing: 2 of 4 MiB, 1,000 spans" in capsys.readouterr().err


def _die_on(name: str) -> str:
    """A worker's task that is killed (as the out-of-memory killer kills) on one input."""
    import os
    import signal

    if name == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return name.upper()


def test_a_worker_killed_under_a_task_is_a_lost_task_not_a_traceback():
    from otel_assay.collect import workers

    out = workers.run(_die_on, [("a",), ("die",), ("b",)], 1, None)
    # one process runs the tasks in order: the first finished, the second killed it, the
    # third could not run after
    assert out[0] == "A" and isinstance(out[1], workers.Lost) and isinstance(out[2], workers.Lost)
    assert workers.run(_die_on, [("a",), ("b",)], 2, None) == ["A", "B"]


def test_records_without_spans_stop_the_file_after_one_with_spans_too(tmp_path):
    # the limit on records in a row that hold no span counted from the last record read with
    # none only while no span had been read: after one, a file of empty records went on
    import struct

    from otel_assay.collect.importer import MAX_EMPTY_RECORDS

    spans = recorded_trials(1)
    empty = b"\x0a\x00"  # an ExportTraceServiceRequest holding one empty ResourceSpans
    data = length_prefixed(spans[:1])
    data += (struct.pack(">I", len(empty)) + empty) * (MAX_EMPTY_RECORDS + 500) + length_prefixed(spans[1:2])
    f = tmp_path / "empties.binpb"
    f.write_bytes(data)
    (report,) = import_files([f], tmp_path / "lake").files
    assert report.spans_imported == 1, report
    assert any(f"{MAX_EMPTY_RECORDS} records in a row hold no span" in e for e in report.errors), report.errors


@pytest.mark.parametrize("layout,expected", [
    ({"proc": "0::/ci/job\n", "ci/job/cpu.max": "200000 100000\n"}, 2.0),           # v2: --cpus 2
    ({"proc": "0::/ci/job\n", "ci/job/cpu.max": "max 100000\n"}, None),             # v2: no limit
    ({"proc": "0::/\n", "cpu.max": "150000 100000\n"}, 1.5),                         # v2, a namespace's root
    ({"proc": "4:memory:/x\n2:cpu,cpuacct:/pod\n",
      "cpu,cpuacct/pod/cpu.cfs_quota_us": "400000\n", "cpu,cpuacct/pod/cpu.cfs_period_us": "100000\n"}, 4.0),
    ({"proc": "1:cpu:/\n", "cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"proc": "garbage\n0::/\n", "cpu.max": "fast slow\n"}, None),                    # unreadable: no quota
    ({}, None),                                                                     # not Linux
])
def test_the_cgroup_cpu_quota_limits_the_workers(tmp_path, layout, expected):
    from otel_assay.collect.workers import cgroup_cpus

    for name, text in layout.items():
        path = tmp_path / ("proc-cgroup" if name == "proc" else f"sys/{name}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert cgroup_cpus(str(tmp_path / "proc-cgroup"), str(tmp_path / "sys")) == expected


def test_usable_cores_is_at_most_the_quota(monkeypatch):
    from otel_assay.collect import workers

    monkeypatch.setattr(workers, "cgroup_cpus", lambda: 1.5)
    assert workers.usable_cores() == min(2, len(os.sched_getaffinity(0)))
    monkeypatch.setattr(workers, "cgroup_cpus", lambda: 0.1)
    assert workers.usable_cores() == 1
