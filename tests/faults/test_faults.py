"""The collector heals from filesystem faults and crashes while the official exporters send.

Each test runs ``otel-assay collect`` as a subprocess with HTTP and gRPC clients (the
official OTLP exporters) sending all the time, injects faults, and checks that the
collector notices each fault (``/health`` 503 with a cause), recovers by itself once it
ends (both exporters succeed again and ``/health`` says 200), stops on SIGTERM in bounded
time, and that the lake holds every acknowledged span exactly once. Run with ``-s`` to see
each test's summary line.
"""

from __future__ import annotations

import os
import random
import shutil

import pytest

from .conftest import is_root
from .scenario import DETECT_S, Scenario

pytestmark = pytest.mark.slow

FAULT_S = 4.0  # how long each fault lasts
PRE_FAULT_S = 1.5  # traffic before it, acknowledged and flushed normally


def _need_read_only(faults) -> None:
    if is_root() and (why := faults.can_mount_read_only()):
        pytest.skip(f"cannot make a directory read-only for root here: {why}")


def test_a_read_only_log_directory_heals(tmp_path, faults, target_factory):
    """A new log segment cannot be created, nor a written one deleted: the acknowledged
    spans stay safe, nothing is acknowledged that is not durable, and once the directory
    is writable again the collector goes on by itself."""
    _need_read_only(faults)
    lake = tmp_path / "lake"
    with Scenario(target_factory(lake)) as sc:
        sc.warm_up()
        sc.hold(PRE_FAULT_S)
        with faults.read_only(lake / "_wal"):
            w = sc.fault_started("read-only _wal")
            sc.hold_fault(w, FAULT_S)
        sc.fault_ended(w)
        sc.check_health_during(w)
        sc.await_recovery(w.end, "the read-only _wal ended")
        sc.hold(1.0)
        summary = sc.finish("read-only _wal")
    sc.verdict(summary)


@pytest.mark.parametrize("of", ["blocks", "inodes"])
def test_a_full_disk_heals(tmp_path, faults, target_factory, of):
    """The lake on a 16 MiB tmpfs of 20,000 inodes, filled for a few seconds (and kept full
    as the collector frees space): of data blocks by one big file, so that neither the log
    nor Parquet can be written; or of inodes by empty files, so that the open log segment
    still takes records but no new segment or Parquet file can be created."""
    lake = tmp_path / "lake"
    faults.small_disk(lake, "16m", inodes=20_000)
    with Scenario(target_factory(lake)) as sc:
        sc.warm_up()
        sc.hold(PRE_FAULT_S)
        with faults.full(lake, of):
            w = sc.fault_started(f"disk full of {of}")
            sc.hold_fault(w, FAULT_S)
        sc.fault_ended(w)
        sc.check_health_during(w)
        sc.await_recovery(w.end, "the disk had room again")
        sc.hold(1.0)
        summary = sc.finish(f"disk full of {of}")
    sc.verdict(summary)


def test_running_out_of_file_descriptors_heals(tmp_path, faults, target_factory):
    """The collector's open-file limit lowered below what it holds for a few seconds: no new
    log segment, Parquet file or connection can be opened. It may win a descriptor back now
    and then (a connection closes) and write for a moment, so /health need only have said
    503 with a cause, on the connection it already had; what it acknowledged must be stored."""
    lake = tmp_path / "lake"
    with Scenario(target_factory(lake)) as sc:
        sc.warm_up()
        sc.hold(PRE_FAULT_S)
        _g, c = sc.target.current()
        with faults.few_descriptors(c.proc.pid):
            w = sc.fault_started("too few file descriptors")
            sc.hold(FAULT_S)
        sc.fault_ended(w)
        sc.check_health_during(w, steady=False)
        sc.await_recovery(w.end, "the limit was raised again")
        sc.hold(1.0)
        summary = sc.finish("too few file descriptors")
    sc.verdict(summary)


def _remove_tree(path) -> None:
    """``rm -rf``, again while the collector writes new files into the tree meanwhile."""
    for _ in range(100):
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass
        except OSError:  # a directory got a new file while it was being emptied
            continue
        if not path.exists():
            return
    raise AssertionError(f"could not delete {path}: the collector keeps writing into it")


def test_the_lake_directory_deleted_and_recreated_heals(tmp_path, target_factory):
    """``rm -rf LAKE`` while spans flow, ``mkdir LAKE`` a few seconds later.

    Spans whose log segment or Parquet files the deletion removed are gone by the test's own
    action, so only the spans of export calls that started after the deletion finished must
    be in the lake; no span may be stored twice anywhere. While the directory is gone the
    collector must not acknowledge into a log that no longer exists (those spans are among
    the ones that must be present)."""
    lake = tmp_path / "lake"
    with Scenario(target_factory(lake)) as sc:
        sc.warm_up()
        sc.hold(PRE_FAULT_S)
        _remove_tree(lake)
        w = sc.fault_started("lake directory deleted")
        sc.hold_fault(w, FAULT_S)
        if lake.exists():  # a missing lake may be an unmounted volume: writing into the mount point hides spans
            sc.problems.append("the collector made the deleted lake directory again itself")
        lake.mkdir(exist_ok=True)
        sc.fault_ended(w)
        sc.check_health_during(w)
        sc.await_recovery(w.end, "the lake directory was made again")
        sc.hold(1.0)
        summary = sc.finish("lake deleted and recreated", must_be_present_since=w.start)
    sc.verdict(summary)


@pytest.mark.parametrize("fault", ["read-only _wal", "full disk", "lake directory deleted"])
def test_sigterm_during_a_fault_ends_in_bounded_time_and_loses_nothing(tmp_path, faults, target_factory, fault):
    """SIGTERM while the log directory is read-only, the disk is full or the lake is
    deleted, the clients still sending: the collector exits within its bound (0, or 4 when
    the last Parquet write failed), and once the fault is gone a start on the same lake
    replays what it left in the log. (After the deletion only spans of exports that began
    after it must be there, as in the test of the deletion alone.)"""
    lake = tmp_path / "lake"
    if fault == "read-only _wal":
        _need_read_only(faults)
    elif fault == "full disk":
        faults.small_disk(lake, "16m")
    with Scenario(target_factory(lake)) as sc:
        sc.warm_up()
        sc.hold(PRE_FAULT_S)
        if fault == "lake directory deleted":
            _remove_tree(lake)
            w = sc.fault_started(fault)
            sc.hold(DETECT_S)
            sc.sigterm_during(w)
            lake.mkdir()
        else:
            with faults.read_only(lake / "_wal") if fault == "read-only _wal" else faults.full(lake):
                w = sc.fault_started(fault)
                sc.hold(DETECT_S)
                sc.sigterm_during(w)
        sc.fault_ended(w)
        sc.restart(f"a start after SIGTERM during the {fault}")
        sc.hold(1.0)
        summary = sc.finish(f"SIGTERM during the {fault}",
                            must_be_present_since=w.start if fault == "lake directory deleted" else float("-inf"))
    sc.verdict(summary)


def test_sigkill_at_random_moments_during_traffic_and_faults(tmp_path, faults, target_factory):
    """SIGKILL at random moments, some during a fault (a read-only log directory, a disk
    full of blocks or of inodes, too few file descriptors) or while the collector recovers
    from one; each time the fault is undone and the collector started again on the same
    lake, where it replays its log. Set OTEL_ASSAY_FAULT_SEED to repeat a run's choices."""
    seed = int(os.environ.get("OTEL_ASSAY_FAULT_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    lake = tmp_path / "lake"
    kinds = ["traffic", "traffic", "too few file descriptors"]
    if not (is_root() and faults.can_mount_read_only()):
        kinds.append("read-only _wal")
    if is_root():
        faults.small_disk(lake, "64m", inodes=100_000)
        kinds += ["disk full of blocks", "disk full of inodes"]
    rounds = kinds + [rng.choice(kinds) for _ in range(2)]
    rng.shuffle(rounds)

    def inject(kind: str, pid: int):
        if kind == "read-only _wal":
            return faults.read_only(lake / "_wal")
        if kind == "too few file descriptors":
            return faults.few_descriptors(pid)
        return faults.full(lake, kind.rsplit(" ", 1)[1])

    with Scenario(target_factory(lake)) as sc:
        sc.warm_up()
        sc.hold(PRE_FAULT_S)
        for i, kind in enumerate(rounds, 1):
            sc.hold(rng.uniform(0.3, 1.5))
            moment = "traffic"
            if kind == "traffic":
                sc.kill()
            else:
                healing = rng.random() < 0.5  # killed while it recovers, else during the fault
                with inject(kind, sc.target.current()[1].proc.pid):
                    w = sc.fault_started(kind)
                    sc.hold(rng.uniform(0.1, 2.0))
                    if not healing:
                        sc.kill()
                sc.fault_ended(w)
                if healing:
                    sc.hold(rng.uniform(0.0, 1.0))
                    sc.kill()
                moment = f"{kind} {'ended, recovering' if healing else 'ongoing'}"
            sc.restart(f"restart {i} (SIGKILL during {moment})")
            rounds[i - 1] = moment
        sc.hold(1.0)
        summary = sc.finish(f"SIGKILL x{len(rounds)} (seed {seed}: {', '.join(rounds)})")
    sc.verdict(summary)
