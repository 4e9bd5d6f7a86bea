"""``otel_assay.trial``: mark one run of the agent on one scenario as a trial (one trace).

>>> with otel_assay.trial("refund-request", version="v2") as t:
...     out = app.invoke({"messages": [...]})
...     t.outcome(passed="refund" in out["messages"][-1].content)

The trial is the root span ``assay.trial {scenario}``. Its ``assay.*`` attributes
(scenario, agent version, run id, trial index) are copied onto every span that starts
inside it, by any instrumentation, in any thread or task that inherits the context (the
span processor looks the trace up; baggage carries them across process boundaries).
"""

from __future__ import annotations

import contextvars
import math
import operator
import os
import re
import threading
from typing import Any

from opentelemetry import baggage as otel_baggage
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Status, StatusCode

from .. import semconv, settings
from . import _runtime
from ._spans import error_type

_CURRENT: contextvars.ContextVar["Trial | None"] = contextvars.ContextVar("otel_assay_trial", default=None)

_INDEX_LOCK = threading.Lock()
_NEXT_INDEX: dict[tuple[str, str | None], int] = {}

_TIMEOUT_NAMES = {"TimeoutError", "Timeout", "ReadTimeout", "ConnectTimeout", "APITimeoutError",
                  "CancelledError", "TimeoutException"}
_INFRA_NAMES = {"ConnectionError", "APIConnectionError", "RateLimitError", "InternalServerError",
                "ServiceUnavailableError", "APIStatusError", "ConnectError", "RemoteProtocolError",
                "BrokenPipeError", "ConnectionResetError", "ConnectionRefusedError"}


# "openai.APIConnectionError: Connection error." at the start of a line: an exception
# written out as text, by traceback.format_exception or as "<type>: <message>"
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*): ", re.MULTILINE)


def _named_in_text(text: str) -> set[str]:
    """The exception class names in a bare RuntimeError's message. AutoGen's teams re-raise
    an agent's error as ``RuntimeError(str(SerializableException))``: its type, message and
    formatted traceback as text, with no cause attached. Only lines that start with a name
    and a colon count, so a message that merely mentions a name elsewhere stays unclassified."""
    return {m.group(1) for m in _EXC_LINE.finditer(text[:100_000])}


def classify_error(exc: BaseException) -> str:
    """assay.error.class for an exception that escaped a trial: ``timeout``,
    ``infrastructure`` (network, rate limit, provider 5xx) or ``exception``.

    The exceptions it was raised ``from`` count too: frameworks wrap the provider's error
    (smolagents raises ``AgentGenerationError`` from the model client's connection error),
    and a provider outage must stay out of the pass rate whatever wraps it."""
    mro: set[str] = set()
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:  # a cause chain may loop
        seen.add(id(e))
        mro.update(c.__name__ for c in type(e).__mro__)
        if type(e) is RuntimeError and e.__cause__ is None:
            mro.update(_named_in_text(str(e)))
        e = e.__cause__
    if mro & _TIMEOUT_NAMES:
        return "timeout"
    if mro & _INFRA_NAMES:
        return "infrastructure"
    return "exception"


def _stopped(exc: BaseException | None) -> str | None:
    """``exit`` for ``sys.exit()`` with code 0 or None (the program ends as it meant to),
    ``interrupted`` for KeyboardInterrupt (someone stopped it); None for anything else,
    which is a failure (``sys.exit(1)`` included)."""
    if isinstance(exc, SystemExit):
        return "exit" if exc.code is None or exc.code == 0 else None
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return None


def _next_index(scenario: str, version: str | None, explicit: int | None) -> int:
    key = (scenario, version)
    with _INDEX_LOCK:
        nxt = _NEXT_INDEX.get(key, 0)
        if explicit is None:
            _NEXT_INDEX[key] = nxt + 1
            return nxt
        _NEXT_INDEX[key] = max(nxt, explicit + 1)
        return explicit


def _after_fork_in_child() -> None:
    global _INDEX_LOCK
    # a forked child has its own run id (_runtime), so its auto-indexes start again at 0
    _INDEX_LOCK = threading.Lock()
    _NEXT_INDEX.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def current_trial() -> "Trial | None":
    """The trial the current context runs in (None outside any trial)."""
    t = _CURRENT.get()
    if t is not None and not t._ended:  # a context copied into a thread can outlive its trial
        return t
    span = trace.get_current_span()
    ctx = span.get_span_context()
    if ctx.is_valid and _runtime.active_trace_attrs(ctx.trace_id) is not None:
        return _BY_TRACE.get(ctx.trace_id)
    return None


_BY_TRACE: dict[int, "Trial"] = {}
_WARNED_NOT_SAMPLED = False


def _warn_not_sampled(scenario: str) -> None:
    """A trial the tracer provider's sampler drops is not recorded at all (none of its spans
    are exported): say so once, instead of a lake silently missing trials."""
    global _WARNED_NOT_SAMPLED
    if _WARNED_NOT_SAMPLED:
        return
    _WARNED_NOT_SAMPLED = True
    p = _runtime.pipeline()
    sampler = getattr(p.provider, "sampler", None) if p is not None else None
    _runtime.log.warning(
        "otel-assay: trial %r is not recorded: the tracer provider's sampler (%s) did not sample it, so none "
        "of its spans reach the lake; trials dropped this way are missing from every pass rate. Sample every "
        "trial (e.g. OTEL_TRACES_SAMPLER=parentbased_always_on). Further unsampled trials are not reported.",
        scenario, getattr(sampler, "get_description", lambda: type(sampler).__name__)())


class Trial:
    """One trial. Use through :func:`trial` as a (sync or async) context manager."""

    def __init__(self, scenario: str, *, version: str | None = None, run_id: str | None = None,
                 index: int | None = None, attributes: dict[str, Any] | None = None,
                 implicit: bool = False):
        if not isinstance(scenario, str) or not scenario:
            raise ValueError("otel_assay.trial: scenario must be a non-empty string")
        if index is not None:
            if isinstance(index, bool) or not hasattr(index, "__index__") or operator.index(index) < 0:
                raise ValueError(f"otel_assay.trial: index must be a non-negative int, not {index!r}")
            index = operator.index(index)
        self.scenario = scenario
        # the lake's version and run id columns are strings: version=2 is version "2" (an int
        # attribute would leave the trial without a version)
        self.version = str(version) if version is not None else settings.version()
        self.run_id = str(run_id) if run_id else _runtime.run_id()
        self._explicit_index = index
        self.index: int | None = None
        self.extra = dict(attributes or {})
        self.implicit = implicit
        self.passed: bool | None = None
        self.score: float | None = None
        self.error_class: str | None = None
        self.span: trace.Span | None = None
        self.trace_id: str | None = None
        self._token = None
        self._var_token = None
        self._ended = False

    # ------------------------------------------------------------------ outcome
    def outcome(self, passed: bool | None = None, score: float | None = None, *,
                error_class: str | None = None) -> "Trial":
        """Record the trial's outcome: ``passed`` (pass/fail), an optional ``score`` and an
        optional ``error_class`` (``infrastructure``, ``pre-validation``, ``empty-run``,
        ``timeout``...; classes the analyzers may exclude from pass rates). Call it before
        the trial ends (inside the ``with`` block)."""
        if self.span is None:
            # before the block: the agent has not run, so this outcome cannot be the trial's
            raise RuntimeError(f"otel_assay: outcome() called before trial {self.scenario!r} was entered; "
                               f"call t.outcome(...) inside the `with otel_assay.trial(...)` block")
        if self._ended:
            # the trial span is already written: an outcome set now would be lost silently
            raise RuntimeError(f"otel_assay: outcome() called after trial {self.scenario!r} ended; "
                               f"call t.outcome(...) inside the `with otel_assay.trial(...)` block")
        if passed is not None:
            # a bool (numpy's too) or 0/1: any other value's truth is no verdict ("false" is truthy)
            if not (type(passed).__name__ in ("bool", "bool_")  # numpy 2 / numpy 1
                    or (isinstance(passed, int) and passed in (0, 1))):
                raise TypeError(f"otel_assay: outcome(passed=...) takes True or False, not {passed!r}")
            self.passed = bool(passed)
        if score is not None:
            score = float(score)
            if not math.isfinite(score):  # an infinite score would swamp every mean it enters
                raise ValueError(f"otel_assay: trial score must be a finite number, not {score!r}")
            self.score = score
        if error_class is not None:
            self.error_class = str(error_class)
        return self

    # ------------------------------------------------------------------ lifecycle
    @property
    def attributes(self) -> dict[str, Any]:
        """The assay.* attributes copied onto every span of the trial."""
        a: dict[str, Any] = {semconv.ASSAY_SCENARIO: self.scenario, semconv.ASSAY_RUN_ID: self.run_id}
        if self.version is not None:
            a[semconv.ASSAY_AGENT_VERSION] = self.version
        if self.index is not None:
            a[semconv.ASSAY_TRIAL_INDEX] = self.index
        return a

    def start(self, *, attach: bool = True) -> "Trial":
        """Open the trial span. ``attach=False`` (used by adapters for implicit trials)
        does not make it the current context; children then pass it as parent."""
        if self.span is not None:
            # one trial is one trace: re-entering would leave the first root span open and
            # its context attached, and overwrite the outcome read from this object
            raise RuntimeError(f"otel_assay: trial {self.scenario!r} was already entered; a trial can be "
                               f"entered once: call otel_assay.trial(...) for each trial")
        self.index = _next_index(self.scenario, self.version, self._explicit_index)
        attrs = self.attributes
        span_attrs = dict(attrs)
        span_attrs.update({k: v for k, v in self.extra.items() if v is not None})
        if self.implicit:
            span_attrs[semconv.ASSAY_TRIAL_IMPLICIT] = True
        outer = trace.get_current_span().get_span_context()
        links = [Link(outer)] if outer.is_valid else None
        # a trial is one trace: a new root, linked to whatever span was current
        self.span = _runtime.tracer().start_span(
            f"assay.trial {self.scenario}", context=otel_context.Context(), attributes=span_attrs, links=links)
        sc = self.span.get_span_context()
        if sc.is_valid and not sc.trace_flags.sampled:
            _warn_not_sampled(self.scenario)
        if sc.is_valid:
            self.trace_id = format(sc.trace_id, "032x")
            _runtime.register_trace(sc.trace_id, attrs)
            _BY_TRACE[sc.trace_id] = self
        if attach:
            ctx = trace.set_span_in_context(self.span)
            for k, v in attrs.items():
                ctx = otel_baggage.set_baggage(k, str(v), ctx)
            self._token = otel_context.attach(ctx)
            self._var_token = _CURRENT.set(self)
        return self

    def finish(self, exc: BaseException | None = None, *, incomplete: str | None = None) -> None:
        """End the trial. ``incomplete`` (adapters): the invocation stopped before completing
        without failing, and why (``interrupted``: a graph paused for a human): recorded as
        ``assay.incomplete`` and as the error class, and an implicit trial gets no verdict."""
        if self._ended:
            return
        self._ended = True
        span = self.span
        try:
            if span is not None:
                sc = span.get_span_context()
                if sc.is_valid:
                    _runtime.trial_ended(sc.trace_id, exc)
                stopped = _stopped(exc)
                if exc is not None and not stopped:
                    self.passed = False
                    if self.error_class is None:
                        self.error_class = classify_error(exc)
                    span.set_attribute(semconv.ERROR_TYPE, error_type(exc))
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, str(exc)[:1024]))
                else:
                    # stopped (sys.exit(0), Ctrl-C) or paused, the agent did not fail: the trial has
                    # the verdict it was given, if any; an implicit one none (its invocation did
                    # not complete), and an interrupted one is unknown to pass rates
                    if stopped == "interrupted":
                        span.record_exception(exc)
                        incomplete = incomplete or "interrupted"
                    if incomplete is not None:
                        span.set_attribute(semconv.ASSAY_INCOMPLETE, incomplete)
                        if self.error_class is None:
                            self.error_class = incomplete
                    elif stopped is None and self.implicit and self.passed is None:
                        self.passed = True  # an implicit trial passes when the invocation completes
                if self.passed is not None:
                    span.set_attribute(semconv.ASSAY_TRIAL_OUTCOME, "pass" if self.passed else "fail")
                if self.score is not None:
                    span.set_attribute(semconv.ASSAY_TRIAL_SCORE, self.score)
                if self.error_class is not None:
                    span.set_attribute(semconv.ASSAY_ERROR_CLASS, self.error_class)
                if self.passed is not None or self.score is not None:
                    ev = {semconv.GEN_AI_EVALUATION_NAME: "assay.trial"}
                    if self.passed is not None:
                        ev[semconv.GEN_AI_EVALUATION_SCORE_LABEL] = "pass" if self.passed else "fail"
                    if self.score is not None:
                        ev[semconv.GEN_AI_EVALUATION_SCORE_VALUE] = self.score
                    span.add_event(semconv.GEN_AI_EVALUATION_RESULT, ev)
                span.end()
        finally:
            if span is not None:
                sc = span.get_span_context()
                _runtime.unregister_trace(sc.trace_id)
                _BY_TRACE.pop(sc.trace_id, None)
            if self._var_token is not None:
                try:
                    _CURRENT.reset(self._var_token)
                except ValueError:  # reset from another context
                    pass
                self._var_token = None
            if self._token is not None:
                otel_context.detach(self._token)
                self._token = None
        if _runtime.flush_each_trial():
            _runtime.flush()  # a multiprocessing.Pool worker may be killed before its exit hooks

    def __enter__(self) -> "Trial":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.finish(exc if exc is not None and not isinstance(exc, GeneratorExit) else None)
        return False  # re-raise

    async def __aenter__(self) -> "Trial":
        return self.start()

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        return self.__exit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return (f"Trial(scenario={self.scenario!r}, version={self.version!r}, index={self.index}, "
                f"run_id={self.run_id!r}, trace_id={self.trace_id!r})")


def trial(scenario: str, *, version: str | None = None, run_id: str | None = None,
          index: int | None = None, attributes: dict[str, Any] | None = None) -> Trial:
    """A context manager (``with`` or ``async with``) that makes its block one trial.

    ``version`` defaults to ``OTEL_ASSAY_VERSION``; ``run_id`` to one id per process
    (``OTEL_ASSAY_RUN_ID`` if set); ``index`` auto-increments per (scenario, version) in
    the process. ``attributes`` adds extra attributes to the trial span only. An exception
    escaping the block marks the trial failed, sets ``assay.error.class`` and re-raises;
    except ``sys.exit()`` with code 0 or None, which fails nothing (the trial keeps the
    outcome it was given, if any), and KeyboardInterrupt, an interruption rather than a
    failure of the agent: no outcome unless one was given, ``assay.error.class``
    ``interrupted``, so pass rates count it as unknown. Every exception propagates unchanged.
    """
    return Trial(scenario, version=version, run_id=run_id, index=index, attributes=attributes)


def implicit_trial(name: str | None = None, *, attach: bool = False) -> Trial | None:
    """For adapters at a top-level agent invocation: when ``OTEL_ASSAY_SCENARIO`` is set and
    no trial is active, open one and return it; not attached to the context unless
    ``attach`` (a wrapper around the whole invocation, which must then finish it)."""
    scenario = settings.scenario()
    if not scenario or _runtime.disabled() or current_trial() is not None:
        return None
    if trace.get_current_span().get_span_context().is_valid:
        return None  # inside someone else's trace: not a top-level invocation
    t = Trial(scenario, implicit=True, attributes={semconv.GEN_AI_AGENT_NAME: name} if name else None)
    return t.start(attach=attach)


def call_in_trial(t: Trial | None, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` for a wrapper around a whole top-level invocation: ``t`` (an
    implicit trial opened with ``attach=True``, or None) ends with the call, failing with
    its exception."""
    if t is None:
        return fn(*args, **kwargs)
    try:
        out = fn(*args, **kwargs)
    except BaseException as e:
        t.finish(e)
        raise
    t.finish()
    return out


async def await_in_trial(t: Trial | None, fn, *args, **kwargs):
    """:func:`call_in_trial` for a coroutine function."""
    if t is None:
        return await fn(*args, **kwargs)
    try:
        out = await fn(*args, **kwargs)
    except BaseException as e:
        t.finish(e)
        raise
    t.finish()
    return out


# ---------------------------------------------------------------- threads
_THREADS_PATCHED = False


# threads started while a thread pool is being grown (ThreadPoolExecutor.submit, a
# multiprocessing.pool.ThreadPool being built) on this thread: those outlive the trial
_POOL_STARTING = threading.local()


def _starting_pool(fn):
    """``fn`` (a method that may start a pool's worker threads), marking on the calling
    thread that threads it starts are a pool's."""
    def wrapper(*args, **kwargs):
        depth = getattr(_POOL_STARTING, "depth", 0)
        _POOL_STARTING.depth = depth + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _POOL_STARTING.depth = depth
    return wrapper


def patch_threads() -> None:
    """Threads started (or executor jobs submitted) inside a trial inherit its context, so
    the spans they create belong to the trial. Frameworks that copy contexts themselves
    (asyncio tasks, LangGraph's executor) need nothing; plain ``threading.Thread`` and
    ``concurrent.futures.ThreadPoolExecutor`` do not copy it, so we do."""
    global _THREADS_PATCHED
    if _THREADS_PATCHED:
        return
    _THREADS_PATCHED = True
    # imported here, at the first instrument(), not when capture is imported: a process that
    # only records trials never loads the multiprocessing pool
    import concurrent.futures
    import multiprocessing.pool

    orig_start = threading.Thread.start
    orig_submit = concurrent.futures.ThreadPoolExecutor.submit
    orig_pool_init = multiprocessing.pool.Pool.__init__
    submit_starting = _starting_pool(orig_submit)

    def start(self, *a, **kw):
        # pool workers outlive the trial: their jobs get the context at submit() (executors)
        # or not at all (multiprocessing.pool.ThreadPool, whose handler threads never end)
        if current_trial() is not None and not getattr(_POOL_STARTING, "depth", 0):
            ctx = contextvars.copy_context()
            run = self.run
            self.run = lambda: ctx.run(run)  # instance attribute: works for subclasses too
        return orig_start(self, *a, **kw)

    def carries_context(f) -> bool:
        f = getattr(f, "func", f)  # functools.partial
        return isinstance(getattr(f, "__self__", None), contextvars.Context)

    def submit(self, fn, /, *args, **kwargs):
        # frameworks that copy the context themselves (LangGraph, LangChain) submit ctx.run
        if (current_trial() is not None and not carries_context(fn)
                and not (args and carries_context(args[0]))):
            return submit_starting(self, contextvars.copy_context().run, fn, *args, **kwargs)
        return submit_starting(self, fn, *args, **kwargs)

    threading.Thread.start = start
    concurrent.futures.ThreadPoolExecutor.submit = submit
    # Pool.__init__, which ThreadPool's calls, starts the pool's workers and handler threads
    multiprocessing.pool.Pool.__init__ = _starting_pool(orig_pool_init)
    patch_threads._orig = (orig_start, orig_submit, orig_pool_init)


def unpatch_threads() -> None:
    global _THREADS_PATCHED
    orig = getattr(patch_threads, "_orig", None)
    if not _THREADS_PATCHED or orig is None:
        return
    import concurrent.futures
    import multiprocessing.pool
    threading.Thread.start, concurrent.futures.ThreadPoolExecutor.submit, multiprocessing.pool.Pool.__init__ = orig
    _THREADS_PATCHED = False
