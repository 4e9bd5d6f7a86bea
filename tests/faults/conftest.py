"""Fault injection for the collector's tests: a read-only directory, a full disk, too few
file descriptors, with their cleanup guaranteed.

As root (here and in CI) ``chmod`` stops nobody, so a read-only directory is a read-only
bind mount of itself, and a full disk is a small tmpfs filled by a file (or, for its
inodes, by empty files). Every mount is
undone in a ``finally`` (lazily if something still holds it): a leaked mount would break
every later test and the machine's next run.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.metadata
import itertools
import os
import resource
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from .traffic import Target

# Before 1.35 the OTLP exporters did not bound export() by their timeout: a batch answered
# 503 was retried for up to 63 s, so a few seconds of fault held the test for minutes.
MIN_EXPORTER = (1, 35)


def _version(dist: str) -> tuple[int, ...]:
    return tuple(int(p) for p in importlib.metadata.version(dist).split(".")[:2] if p.isdigit())


@pytest.fixture(autouse=True)
def _exporters_bound_their_exports():
    for dist in ("opentelemetry-exporter-otlp-proto-http", "opentelemetry-exporter-otlp-proto-grpc"):
        if _version(dist) < MIN_EXPORTER:
            pytest.skip(f"{dist} {importlib.metadata.version(dist)} retries a refused batch for up to 63 s "
                        f"whatever its timeout; the fault suite needs {'.'.join(map(str, MIN_EXPORTER))} or later")


class _NoSpace(Exception):
    """The filesystem is full (ENOSPC): of blocks or of inodes."""


def _no_space_raises(call, *args):
    try:
        return call(*args)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise _NoSpace from None
        raise


def is_root() -> bool:
    return os.geteuid() == 0


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def mounted(path: Path) -> bool:
    """Whether something is mounted on ``path``. (``os.path.ismount`` compares devices, so it
    misses a bind mount of a directory on itself.)"""
    target = os.path.realpath(path)
    with open("/proc/self/mounts", encoding="utf-8") as f:
        points = [line.split()[1].encode().decode("unicode_escape") for line in f if line.strip()]
    return target in points


def unmount(path: Path) -> None:
    """Undo a mount on ``path``; lazily when a process still holds it busy."""
    for _ in range(10):
        if _run("umount", str(path)).returncode == 0 or not mounted(path):
            return
        time.sleep(0.1)
    lazy = _run("umount", "-l", str(path))
    assert lazy.returncode == 0 and not mounted(path), f"cannot unmount {path}: {lazy.stderr}"


class Faults:
    """The faults a test may inject; every one is undone by the ``faults`` fixture at the
    latest."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.mounted: list[Path] = []
        self.modes: list[tuple[Path, int]] = []

    # ------------------------------------------------------------------ read-only directory
    def can_mount_read_only(self) -> str | None:
        """None when a read-only bind mount works here, else why not."""
        probe = self.scratch / "ro-probe"
        probe.mkdir(exist_ok=True)
        try:
            with self.read_only(probe):
                try:
                    (probe / "x").touch()
                except OSError as e:
                    return None if e.errno == errno.EROFS else f"a write under the read-only bind mount failed with {e}"
                return "a file could still be created under the read-only bind mount"
        except OSError as e:
            return str(e)

    @contextlib.contextmanager
    def read_only(self, path: Path):
        """``path`` read-only: a read-only bind mount of itself as root, mode 0555 otherwise."""
        if not is_root():
            mode = path.stat().st_mode & 0o7777
            self.modes.append((path, mode))
            path.chmod(0o555)
            try:
                yield
            finally:
                path.chmod(mode)
                self.modes.remove((path, mode))
            return
        self._mount_read_only(path)
        try:
            yield
        finally:
            unmount(path)
            self.mounted.remove(path)

    def _mount_read_only(self, path: Path) -> None:
        """Bind-mount ``path`` on itself, then make that mount read-only. A file opened for
        writing through the new mount in between (the collector starting a log segment)
        makes the second step fail as busy: undo the first and try again."""
        for _ in range(40):
            bind = _run("mount", "--bind", str(path), str(path))
            if bind.returncode:
                raise OSError(f"mount --bind {path} failed: {bind.stderr.strip()}")
            ro = _run("mount", "-o", "remount,bind,ro", str(path))
            if not ro.returncode:
                self.mounted.append(path)
                return
            unmount(path)
            if "busy" not in ro.stderr:
                break
            time.sleep(0.05)
        raise OSError(f"mount -o remount,bind,ro {path} failed: {ro.stderr.strip()}")

    # ------------------------------------------------------------------ full disk
    def small_disk(self, path: Path, size: str = "16m", inodes: int = 20_000) -> None:
        """Mount a tmpfs of ``size`` and ``inodes`` on ``path`` (until the test ends); skip
        when not root."""
        if not is_root():
            pytest.skip("a full disk needs a small filesystem to fill, and mounting one needs root")
        path.mkdir(parents=True, exist_ok=True)
        try:
            r = _run("mount", "-t", "tmpfs", "-o", f"size={size},nr_inodes={inodes}", "tmpfs", str(path))
        except OSError as e:  # no mount command
            pytest.skip(f"cannot mount a tmpfs: {e}")
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
        self.mounted.append(path)

    @contextlib.contextmanager
    def full(self, path: Path, of: str = "blocks"):
        """Fill the filesystem of ``path``, of data blocks (one big file) or of inodes (empty
        files), and keep it full (the collector frees space as it deletes log segments)
        until the block ends; then remove the filler."""
        filler = path / ".filler"
        stop = threading.Event()
        filled = threading.Event()
        failed: list[BaseException] = []

        def fill_blocks():
            chunk = b"\0" * (1 << 20)
            with open(filler, "ab", buffering=0) as f:
                for size in (len(chunk), 4096):  # MiB by MiB, then the last pages
                    with contextlib.suppress(_NoSpace):
                        while True:
                            _no_space_raises(f.write, chunk[:size])

        names = itertools.count()

        def fill_inodes():
            filler.mkdir(exist_ok=True)
            with contextlib.suppress(_NoSpace):
                while True:
                    os.close(_no_space_raises(os.open, filler / str(next(names)), os.O_CREAT | os.O_WRONLY))

        def keep_full():
            try:
                while not stop.is_set():
                    (fill_blocks if of == "blocks" else fill_inodes)()
                    filled.set()
                    stop.wait(0.005)  # a segment the collector deletes must not make room for long
            except BaseException as e:  # noqa: BLE001 - reported by the test's thread below
                failed.append(e)
                filled.set()

        t = threading.Thread(target=keep_full, name="fault-disk-filler", daemon=True)
        t.start()
        try:
            assert filled.wait(30) and not failed, f"could not fill {path} with {of}: {failed}"
            yield
        finally:
            stop.set()
            t.join(timeout=10)
            if filler.is_dir():
                shutil.rmtree(filler)
            else:
                filler.unlink(missing_ok=True)

    # ------------------------------------------------------------------ file descriptors
    @contextlib.contextmanager
    def few_descriptors(self, pid: int):
        """Lower the process's open-file limit (soft; the hard one stays, so it can be raised
        again) below the descriptors it holds: it can open nothing until it closes some."""
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        held = len(os.listdir(f"/proc/{pid}/fd"))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (max(3, held - 2), hard))
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))

    def cleanup(self) -> None:
        for path, mode in reversed(self.modes):
            path.chmod(mode)
        for path in reversed(self.mounted):
            unmount(path)


@pytest.fixture
def faults(tmp_path):
    f = Faults(tmp_path)
    try:
        yield f
    finally:
        f.cleanup()


@pytest.fixture
def target_factory(faults):
    """Start the collector on a lake; it is killed at the end of the test at the latest,
    before the ``faults`` fixture unmounts anything under it."""
    started: list[Target] = []

    def start(lake: Path, *extra: str) -> Target:
        t = Target(lake, *extra)
        started.append(t)
        return t

    try:
        yield start
    finally:
        for t in started:
            t.close()
