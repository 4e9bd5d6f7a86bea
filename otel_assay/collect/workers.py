"""A pool of processes for work that is CPU-bound in Python (reading span files): one task
per process at a time, results in the order of the tasks, progress from every worker.

Processes, not threads: decoding and row building hold the GIL. Started with ``spawn``, not
``fork``: the parent may already run Arrow's and DuckDB's threads, and a forked child of a
threaded process can inherit a lock some thread held.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from typing import Any, Callable

Progress = Callable[[int, int], None]
"""Told (bytes read from disk, spans read) since it was last told."""

_TICK_SECONDS = 0.2

_channel: Any = None  # in a worker: the queue its progress goes to
_pending = [0, 0]
_last = 0.0


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as a container or taskset limits it)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


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


def _init(channel) -> None:
    global _channel
    _channel = channel


def run(fn: Callable[..., Any], tasks: list[tuple], jobs: int, progress: Progress | None) -> list:
    """``[fn(*task) for task in tasks]`` in up to ``jobs`` processes; the first exception a
    task raises is raised here once the tasks under way have ended (and no new one starts).

    ``fn`` must be a module-level function; it reports progress with
    :func:`worker_progress` and calls :func:`flush_progress` before it returns."""
    ctx = multiprocessing.get_context("spawn")
    channel = ctx.Queue()
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx, initializer=_init,
                             initargs=(channel,)) as pool:
        futures: list[Future] = [pool.submit(fn, *task) for task in tasks]
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, timeout=_TICK_SECONDS, return_when=FIRST_EXCEPTION)
                _drain(channel, progress)
                if any(f.exception() is not None for f in done):
                    break
        finally:
            for f in pending:
                f.cancel()
        _drain(channel, progress)
        return [f.result() for f in futures]


def _drain(channel, progress: Progress | None) -> None:
    while True:
        try:
            nbytes, nspans = channel.get_nowait()
        except queue.Empty:
            return
        if progress is not None:
            progress(nbytes, nspans)
