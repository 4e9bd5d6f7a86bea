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
import signal
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable

Progress = Callable[[int, int], None]
"""Told (bytes read from disk, spans read) since it was last told."""

_TICK_SECONDS = 0.2

_channel: Any = None  # in a worker: the queue its progress goes to
_counts: Any = None  # in a worker: the run's shared counters
_pending = [0, 0]
_last = 0.0


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as a container or taskset limits it)."""
    count = getattr(os, "process_cpu_count", None)  # Python 3.13+: also honours -X cpu_count
    if count is not None:
        return count() or 1
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
