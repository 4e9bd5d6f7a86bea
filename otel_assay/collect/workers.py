"""A pool of processes for work that is CPU-bound in Python (reading span files): one task
per process at a time, results in the order of the tasks, progress from every worker.

Processes, not threads: decoding and row building hold the GIL. Started with ``spawn``, not
``fork``: the parent may already run Arrow's and DuckDB's threads, and a forked child of a
threaded process can inherit a lock some thread held.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import signal
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable

Progress = Callable[[int, int], None]
"""Told (bytes read from disk, spans read) since it was last told."""

_TICK_SECONDS = 0.2

_channel: Any = None  # in a worker: the queue its progress goes to
_counts: Any = None  # in a worker: the run's shared counters
_pending = [0, 0]
_last = 0.0


def usable_cores() -> int:
    """The cores this process may use: its affinity (taskset, a cpuset), and its cgroup's CPU
    quota, which is how Docker (``--cpus``), Kubernetes (a CPU limit) and CI runners limit a
    container; neither ``os.cpu_count`` nor ``os.process_cpu_count`` reads the quota, so a
    container allowed 2 CPUs on a 64-core host would start 64 workers of ~0.5 GB each."""
    count = getattr(os, "process_cpu_count", None)  # Python 3.13+: also honours -X cpu_count
    if count is not None:
        cores = count() or 1
    else:
        try:
            cores = len(os.sched_getaffinity(0)) or 1
        except AttributeError:  # not on every platform
            cores = os.cpu_count() or 1
    quota = cgroup_cpus()
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def cgroup_cpus(proc: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> float | None:
    """The CPU quota of this process's cgroup in cores (quota / period), or None: no quota,
    or no cgroup to read (not Linux). cgroup v2 keeps it in ``cpu.max`` ("max 100000" or
    "200000 100000"), v1 in ``cpu.cfs_quota_us`` (-1: none) and ``cpu.cfs_period_us``."""
    try:
        lines = Path(proc).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        # inside a container the cgroup is its namespace's root: the path reads "/"
        if controllers == "":
            text = _read_first(Path(root, path.lstrip("/"), "cpu.max"), Path(root, "cpu.max"))
            fields = text.split() if text else []
            if len(fields) == 2 and fields[0] != "max":
                return _ratio(fields[0], fields[1])
        elif "cpu" in controllers.split(","):
            base = Path(root, controllers)
            if not base.is_dir():
                base = Path(root, "cpu")
            quota = _read_first(base / path.lstrip("/") / "cpu.cfs_quota_us", base / "cpu.cfs_quota_us")
            period = _read_first(base / path.lstrip("/") / "cpu.cfs_period_us", base / "cpu.cfs_period_us")
            if quota and period and not quota.startswith("-"):
                return _ratio(quota, period)
    return None


def _read_first(*paths: Path) -> str | None:
    for p in paths:
        try:
            return p.read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue
    return None


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def in_worker() -> bool:
    """Whether this process is a worker of :func:`run`."""
    return _channel is not None


def worker_progress(nbytes: int, nspans: int) -> None:
    """A worker's :data:`Progress`: sent to the parent at most every 0.2 s."""
    global _last
    _pending[0] += nbytes
    _pending[1] += nspans
    now = time.monotonic()
    if now - _last >= _TICK_SECONDS:
        flush_progress()
        _last = now


def flush_progress() -> None:
    """Send what a worker has not yet reported (at the end of a task)."""
    if _channel is not None and (_pending[0] or _pending[1]):
        _channel.put((_pending[0], _pending[1]))
    _pending[0] = _pending[1] = 0


def add_count(i: int, n: int) -> int:
    """Add ``n`` to the run's shared counter ``i`` and return its total: what the tasks of a
    run count together (the spans of one file read in ranges by several workers)."""
    with _counts.get_lock():
        _counts[i] += n
        return _counts[i]


def _init(channel, stop, counts) -> None:
    global _channel, _stop, _counts
    _channel, _stop, _counts = channel, stop, counts
    signal.signal(signal.SIGINT, _on_interrupt)


_stop: Any = None  # in a worker: set when the run ends early, so that no further task starts


_busy = False  # running a task


def _on_interrupt(signum, frame) -> None:
    """Ctrl-C reaches the workers too (the terminal signals the whole process group): in a
    task it stops the task as in one process (a file half written is removed); between
    tasks the worker just ends, without a traceback of the pool's own code. The parent,
    interrupted as well, ends the run."""
    if _busy:
        raise KeyboardInterrupt
    os._exit(130)


def _task(fn: Callable[..., Any], *args) -> Any:
    global _busy
    if _stop.is_set():  # the run was interrupted or failed: the task was queued before
        raise KeyboardInterrupt
    _busy = True
    try:
        return fn(*args)
    finally:
        _busy = False


class Lost:
    """The result of a task whose process died under it (killed: the out-of-memory killer, a
    signal), or that never ran because one did: the pool cannot go on after a death."""


def run(fn: Callable[..., Any], tasks: list[tuple], jobs: int, progress: Progress | None, counters: int = 0) -> list:
    """``[fn(*task) for task in tasks]`` in up to ``jobs`` processes; the first exception a
    task raises is raised here once the tasks under way have ended (and no new one starts).
    A task whose process died, and each one left undone then, gives a :class:`Lost`.

    ``fn`` must be a module-level function; it reports progress with
    :func:`worker_progress` and calls :func:`flush_progress` before it returns. The tasks
    share ``counters`` counters, starting at 0 (:func:`add_count`)."""
    ctx = multiprocessing.get_context("spawn")
    channel, stop, counts = ctx.Queue(), ctx.Event(), ctx.Array("q", max(counters, 1))
    before = set(multiprocessing.active_children())
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx, initializer=_init,
                             initargs=(channel, stop, counts)) as pool:
        futures = _submit(pool, fn, tasks)
        workers = [p for p in multiprocessing.active_children() if p not in before]
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, timeout=_TICK_SECONDS, return_when=FIRST_EXCEPTION)
                _drain(channel, progress)
                if any(f.exception() is not None for f in done):
                    break
        except KeyboardInterrupt:
            # the workers were interrupted too, unless still starting (Ctrl-C ignored until
            # then) or the signal came from elsewhere: each stops its task as one process would
            for p in workers:
                if p.is_alive():
                    os.kill(p.pid, signal.SIGINT)
            raise
        finally:
            if pending:
                stop.set()
                for f in pending:
                    f.cancel()
        _drain(channel, progress)
        if any(isinstance(f.exception(), BrokenProcessPool) for f in futures if f.done() and not f.cancelled()):
            return [f.result() if f.done() and not f.cancelled() and f.exception() is None else Lost()
                    for f in futures]
        return [f.result() for f in futures]


def _submit(pool: ProcessPoolExecutor, fn: Callable[..., Any], tasks: list[tuple]) -> list[Future]:
    """Submit every task; the pool starts its processes here. They start with Ctrl-C ignored
    (a child inherits that): until :func:`_init` sets their handler they import modules, and
    an interrupt there printed a traceback of the import machinery in every worker."""
    if threading.current_thread() is not threading.main_thread():  # only it may set handlers
        return [pool.submit(_task, fn, *task) for task in tasks]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return [pool.submit(_task, fn, *task) for task in tasks]
    finally:
        signal.signal(signal.SIGINT, previous)


def _drain(channel, progress: Progress | None) -> None:
    while True:
        try:
            nbytes, nspans = channel.get_nowait()
        except queue.Empty:
            return
        if progress is not None:
            progress(nbytes, nspans)
