"""Added cost per agent step of otel-assay's capture (adapter + span + export to the lake),
on a real LangGraph run with a scripted model, against a bare OTel SDK span with the same
attributes and against the OpenInference LangChain instrumentor on the same run.

    python bench/bench_capture.py [--runs 20] [--rounds 10] [--repeat 15] [--attr-turns 50]
                                  [--flush-each-turn]

All modes run in one interpreter, taking turns --repeat times (a turn is --runs graph runs):
  bare     the graph, nothing instrumented
  assay    otel_assay.instrument(), each run inside a trial, spans to a Parquet lake; the
           turn ends with otel_assay.flush(), so the export work is charged to this mode
  noop     a LangChain callback handler that does nothing, registered the way ours is:
           LangChain's own dispatch, which any callback-based instrumentation pays
  oi       OpenInference's LangChainInstrumentor, on its own SDK provider with a
           BatchSpanProcessor and a discarding exporter (if installed)
  span     the attributes our adapter recorded, on bare SDK spans (own provider, BSP,
           discarding exporter), one per step, in a tight loop
  in_run   the same bare SDK spans started and ended at the callbacks where our adapter
           starts and ends its spans, inside the graph run; only the SDK calls are timed
added cost per step = (t_mode - t_bare) / steps per run, in CPU time of the process (all
threads), median over the turns. Taking turns in one process matters: separate processes
differed by 10-50 % in bare CPU time alone, more than the cost being measured.

That difference is still noisy (LangGraph's own run varies more than our cost), so the
cost is also counted directly: per-thread CPU time inside otel-assay's code
(`attributed_*`), compared with the in-run bare span (`ratio_attributed_vs_bare_span_in_run`,
the figure the target is about), both over --attr-turns turns taken in alternation. There
the exporter writes files as it does in an application, by its own policy (every
OTEL_ASSAY_FLUSH_SECONDS, 5, or OTEL_ASSAY_FLUSH_ROWS spans), and its flush thread's work is
counted whenever it runs, plus a last flush at the end (`attributed_spans_per_file`). A flush
after every turn (--flush-each-turn, as the median's turns do) makes a file per 440 spans,
whose fixed costs (a Parquet writer, footer, fsync, a sort per table) then weigh about
10 us more per step than in the files the exporter makes by itself.

Garbage collection is in both: a collection runs in whatever code allocates when a threshold
is reached, so each side pays for collections in rough proportion to what it allocates. A
full collection (every object of the process; LangGraph's keep it at 70-80 ms here) comes
about once per 4,000 steps and lands wherever it lands: one in a measurement of 2,000 steps
moved the per-step figure by 35 us, and a change to capture that moves an allocation moves
where collections land (the process is deterministic) without changing how many there are.
So the figures are also given with the collector's time taken out (`*_excluding_gc`), and
with each mode charged instead for the collection time its turns add to the process over
bare turns taken in the same alternation (`gc_added_us_per_step`, `ratio_gc_by_mode`).
Prints one JSON line.
"""

from __future__ import annotations

import argparse
from contextvars import ContextVar
import json
import os
import statistics
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def workload(rounds: int):
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return json.dumps({"order_id": order_id, "status": "shipped", "amount": 12.5})

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools, **kw):
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools])

    def turns():
        for i in range(rounds):
            yield AIMessage(content="", tool_calls=[{"name": "lookup_order", "args": {"order_id": f"A{i}"},
                                                     "id": f"call_{i}", "type": "tool_call"}],
                            usage_metadata={"input_tokens": 100 + i, "output_tokens": 20, "total_tokens": 120 + i},
                            response_metadata={"model_name": "scripted-1", "finish_reason": "tool_calls"})
        yield AIMessage(content="Your order is shipped.", usage_metadata={"input_tokens": 300, "output_tokens": 9,
                                                                           "total_tokens": 309},
                        response_metadata={"model_name": "scripted-1", "finish_reason": "stop"})

    def build():
        model = Scripted(messages=turns()).bind_tools([lookup_order])
        g = StateGraph(MessagesState)
        g.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
        g.add_node("tools", ToolNode([lookup_order]))
        g.add_edge(START, "agent")
        g.add_conditional_edges("agent", tools_condition)
        g.add_edge("tools", "agent")
        return g.compile(name="support")

    def run():
        build().invoke({"messages": [HumanMessage("where is my order?")]})

    steps = 2 * rounds + 2  # chat per round + tool per round + final chat + the agent span
    return run, steps


class _Discard:
    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def _sdk_provider():
    """A provider of its own (not the global one, which otel_assay owns in this process)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=1 << 20))
    return tp


def _cpu(fn, runs: int, after=None) -> float:
    """CPU seconds per call of fn (all threads of the process): the cost capture adds. Wall
    time would mostly measure how soon the OS wakes ToolNode's pool threads."""
    t0 = time.process_time()
    for _ in range(runs):
        fn()
    if after:
        after()
    return (time.process_time() - t0) / runs


class _GcClock:
    """Per-thread CPU time spent in garbage collection (gc.callbacks): a timed region
    subtracts what ran inside it."""

    def __init__(self):
        import gc
        import threading
        self.local = threading.local()
        self.full = 0  # full (generation 2) collections seen
        self.total = 0  # ns of collection in every thread
        gc.callbacks.append(self._callback)

    def _callback(self, phase, info):
        loc = self.local
        if phase == "start":
            loc.t0 = time.thread_time_ns()
        elif hasattr(loc, "t0"):
            dt = time.thread_time_ns() - loc.t0
            loc.ns = getattr(loc, "ns", 0) + dt
            self.total += dt
            self.full += info.get("generation") == 2

    def ns(self) -> int:
        return getattr(self.local, "ns", 0)


class _Attribution:
    """CPU time spent inside otel-assay's own code, counted directly: every callback of our
    LangChain handler (which starts and ends the SDK spans, so span creation and our span
    processors are inside it), the trial block's enter/exit, our span processors, and the
    exporter's flush (Parquet encoding, in its own thread). Per-thread CPU clock, outermost
    call only. This is the "adapter + span + export" cost itself, free of the run-to-run
    noise of LangGraph around it; LangChain's callback dispatch is not in it (noop shows that)."""

    def __init__(self, gc_clock: _GcClock):
        import threading
        self.local = threading.local()
        self.ns = {"handler": 0, "trial": 0, "processors": 0, "export_convert": 0, "export_flush": 0}
        self.calls = dict.fromkeys(self.ns, 0)
        self.inner_ns: dict[str, int] = {}
        self.inner_calls: dict[str, int] = {}
        self.gc_ns = 0  # collections inside those calls (included in ns)
        self.gc_clock = gc_clock
        self.on = False
        self.lock = threading.Lock()

    def wrap(self, cls, name: str, bucket: str, always: bool = False, inner: bool = False) -> None:
        """Count ``cls.name`` in ``bucket`` during assay turns, or with ``always`` wherever it
        runs (the exporter's flush thread writes a file when it is due, in any mode's turn).
        ``inner``: a part of what an outer bucket counts, timed on its own (in ``inner_ns``,
        not added to the total)."""
        import functools
        orig = getattr(cls, name)
        att = self
        depth = "inner_depth" if inner else "depth"
        ns, calls = (att.inner_ns, att.inner_calls) if inner else (att.ns, att.calls)
        ns.setdefault(bucket, 0)
        calls.setdefault(bucket, 0)

        @functools.wraps(orig)
        def wrapper(*a, **kw):
            if not (att.on or always) or getattr(att.local, depth, 0):
                return orig(*a, **kw)
            setattr(att.local, depth, 1)
            g0 = att.gc_clock.ns()
            t0 = time.thread_time_ns()
            try:
                return orig(*a, **kw)
            finally:
                dt = time.thread_time_ns() - t0
                dg = att.gc_clock.ns() - g0
                setattr(att.local, depth, 0)
                with att.lock:
                    ns[bucket] += dt
                    calls[bucket] += 1
                    if not inner:
                        att.gc_ns += dg
        setattr(cls, name, wrapper)

    def install(self) -> None:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from otel_assay.capture import _runtime, langchain, trial
        from otel_assay.collect.exporter import ParquetSpanExporter
        for name in dir(langchain.AssayCallbackHandler):
            if name.startswith("on_") and callable(getattr(langchain.AssayCallbackHandler, name)):
                self.wrap(langchain.AssayCallbackHandler, name, "handler")
        self.wrap(trial.Trial, "__enter__", "trial")
        self.wrap(trial.Trial, "__exit__", "trial")
        self.wrap(_runtime.AssayAttributesProcessor, "on_start", "processors")
        self.wrap(_runtime.AssayAttributesProcessor, "on_end", "processors")
        # what exporting costs the thread that ends a span (inside the handler's callbacks):
        # the BatchSpanProcessor queues it
        self.wrap(BatchSpanProcessor, "on_end", "export_enqueue", inner=True)
        # converting queued spans to rows, on the BatchSpanProcessor's worker thread (or on
        # the flushing thread, at a flush), and writing files on the exporter's own thread
        self.wrap(_runtime.LakeExporter, "export", "export_convert", always=True)
        self.wrap(ParquetSpanExporter, "_flush", "export_flush", always=True)

def recorded_steps(in_trial) -> dict[str, list]:
    """What our adapter puts on each span, recorded from one instrumented run: span kind
    word ("chat", "execute_tool", "invoke_agent") -> [(name, SpanKind, attributes), ...]."""
    import otel_assay
    from opentelemetry.sdk.trace import SpanProcessor
    from otel_assay.capture import _runtime

    by_kind: dict[str, list] = {}

    class Rec(SpanProcessor):
        on = True

        def on_end(self, span):
            if self.on:
                by_kind.setdefault(span.name.split(" ")[0], []).append((span.name, span.kind, dict(span.attributes)))
    otel_assay.instrument(["langchain"])
    rec = Rec()
    # the SDK has no call to take a processor off a provider: it stays, switched off (a
    # Python call per span start and end, a fraction of a microsecond, charged to assay)
    _runtime.pipeline().provider.add_span_processor(rec)
    in_trial()
    rec.on = False
    otel_assay.flush()
    otel_assay.uninstrument()
    return by_kind


class _Hook:
    """A LangChain callback handler attached to every run while ``on`` (a with block), off
    otherwise: LangChain's configure hook reads a context variable, set here in the current
    context (which LangGraph copies into the threads it runs tools in)."""

    def __init__(self, name: str, handler):
        from langchain_core.tracers import context as lc_context
        self.var: ContextVar = ContextVar(name, default=None)
        self.handler = handler
        lc_context.register_configure_hook(self.var, inheritable=True)

    def __enter__(self):
        self.token = self.var.set(self.handler)

    def __exit__(self, *exc):
        self.var.reset(self.token)


def in_run_handler(tracer, by_kind: dict[str, list], timed: bool = True, gc_clock: _GcClock | None = None):
    """A LangChain callback handler that starts and ends bare SDK spans with the attributes
    our adapter recorded for each step (``by_kind``), at the callbacks where our adapter
    starts and ends its spans: the baseline measured inside the same run. With ``timed`` its
    ``ns`` adds up the per-thread CPU time of the SDK calls only. A span in a tight loop is
    cheaper than the same span inside an agent run, whose framework code has evicted the
    interpreter's caches in between; comparing our in-run cost with a tight-loop span would
    flatter the SDK."""
    import threading

    from langchain_core.callbacks import BaseCallbackHandler

    lock = threading.Lock()

    class InRun(BaseCallbackHandler):
        run_inline = True

        def __init__(self):
            self.ns = 0
            self.gc_ns = 0
            self.open: dict = {}
            self.next: dict[str, int] = {}

        def _timed(self, fn):
            g0 = gc_clock.ns() if gc_clock else 0
            t = time.thread_time_ns()
            out = fn()
            dt = time.thread_time_ns() - t
            dg = gc_clock.ns() - g0 if gc_clock else 0
            with lock:
                self.ns += dt
                self.gc_ns += dg
            return out

        def _start(self, run_id, kind):
            with lock:
                i = self.next.get(kind, 0)
                self.next[kind] = i + 1
            name, k, attrs = by_kind[kind][i % len(by_kind[kind])]
            if timed:
                self.open[run_id] = self._timed(lambda: tracer.start_span(name, kind=k, attributes=attrs))
            else:
                self.open[run_id] = tracer.start_span(name, kind=k, attributes=attrs)

        def _end(self, run_id):
            span = self.open.pop(run_id, None)
            if span is not None:
                if timed:
                    self._timed(span.end)
                else:
                    span.end()

        def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kw):
            if parent_run_id is None:
                self._start(run_id, "invoke_agent")

        def on_chain_end(self, outputs, *, run_id, **kw):
            self._end(run_id)

        def on_chat_model_start(self, serialized, messages, *, run_id, **kw):
            # defined, as ours is: without it LangChain renders the whole conversation as
            # text for on_llm_start on every call, a cost our handler does not have
            pass

        def on_llm_end(self, response, *, run_id, **kw):
            self._start(run_id, "chat")
            self._end(run_id)

        def on_tool_start(self, serialized, input_str, *, run_id, **kw):
            self._start(run_id, "execute_tool")

        def on_tool_end(self, output, *, run_id, **kw):
            self._end(run_id)

    return InRun()


def measure(runs: int, rounds: int, repeat: int, attr_turns: int, lake: str, flush_each_turn: bool) -> dict:
    os.environ["OTEL_ASSAY_DIR"] = lake
    import otel_assay
    from langchain_core.callbacks import BaseCallbackHandler

    run, steps = workload(rounds)

    def in_trial():
        with otel_assay.trial("bench", version="v1"):
            run()

    by_kind = recorded_steps(in_trial)
    span_tp = _sdk_provider()
    tracer = span_tp.get_tracer("bench")
    kinds = {word: spans[0] for word, spans in by_kind.items()}
    plan = [kinds["chat"], kinds["execute_tool"]] * rounds + [kinds["chat"], kinds["invoke_agent"]]

    def spans():
        for name, kind, a in plan:
            tracer.start_span(name, kind=kind, attributes=a).end()

    class Noop(BaseCallbackHandler):
        def on_chat_model_start(self, serialized, messages, *, run_id, **kw):
            pass  # see in_run_handler: without it LangChain renders every conversation as text

    noop_hook = _Hook("bench_noop", Noop())
    gc_clock = _GcClock()
    in_run = in_run_handler(tracer, by_kind, gc_clock=gc_clock)
    in_run_hook = _Hook("bench_in_run", in_run)

    oi = None
    try:
        from openinference.instrumentation.langchain import LangChainInstrumentor
        oi, oi_tp = LangChainInstrumentor(), _sdk_provider()
    except ImportError:
        pass

    def turn(mode: str, flush: bool = True) -> float:
        if mode == "bare":
            return _cpu(run, runs)
        if mode == "assay":
            otel_assay.instrument(["langchain"])
            try:
                return _cpu(in_trial, runs, after=otel_assay.flush if flush else None)
            finally:
                otel_assay.uninstrument()
        if mode == "noop":
            with noop_hook:
                return _cpu(run, runs)
        if mode == "in_run":
            with in_run_hook:
                return _cpu(run, runs, after=span_tp.force_flush)
        if mode == "oi":
            oi.instrument(tracer_provider=oi_tp)
            try:
                return _cpu(run, runs, after=oi_tp.force_flush)
            finally:
                oi.uninstrument()
        return _cpu(spans, runs, after=span_tp.force_flush) / len(plan)  # span: per step

    modes = ["bare", "assay", "noop", "span", "in_run"] + (["oi"] if oi else [])
    for mode in modes:  # warm-up: first calls import and compile
        turn(mode)
    samples: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(repeat):
        for mode in modes:
            samples[mode].append(turn(mode))
    # the direct count, in turns of its own (its wrappers cost a little themselves), taking
    # turns with the in-run bare span so that both see the same process
    att = _Attribution(gc_clock)
    att.install()
    in_run.ns = in_run.gc_ns = 0
    from otel_assay.capture import _runtime
    exporter = _runtime.pipeline().exporter
    files_before, written_before = exporter.files_written, exporter.spans_written
    full = {"bare": 0, "assay": 0, "in_run": 0}
    gc_ns = dict.fromkeys(full, 0)  # collection time in the process during each mode's turns
    for _ in range(attr_turns):
        for mode in full:
            before, before_ns = gc_clock.full, gc_clock.total
            att.on = mode == "assay"
            turn(mode, flush=flush_each_turn)
            att.on = False
            full[mode] += gc_clock.full - before
            gc_ns[mode] += gc_clock.total - before_ns
    att.on = True
    otel_assay.flush()  # what the last turns left buffered
    att.on = False
    files = exporter.files_written - files_before
    n = attr_turns * runs * steps
    per_step = {k: v / 1e9 / n for k, v in att.ns.items()}
    st = otel_assay.capture.stats()
    return {"steps": steps, "median": {m: statistics.median(v) for m, v in samples.items()}, "attributed": per_step,
            "attributed_gc": att.gc_ns / 1e9 / n,
            "export_enqueue_per_span": att.inner_ns["export_enqueue"] / 1e9 / max(att.inner_calls["export_enqueue"], 1),
            "export_enqueue_spans": att.inner_calls["export_enqueue"],
            "bare_span_in_run": in_run.ns / 1e9 / n, "bare_span_in_run_gc": in_run.gc_ns / 1e9 / n,
            "full_collections": full, "gc_in_turns": {m: v / 1e9 / n for m, v in gc_ns.items()},
            "spans_produced": st["spans_produced"], "spans_written": st.get("spans_written"),
            "attributed_spans_per_file": round((exporter.spans_written - written_before) / max(files, 1))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20, help="graph runs per turn")
    ap.add_argument("--rounds", type=int, default=10, help="tool rounds per graph run")
    ap.add_argument("--repeat", type=int, default=15, help="turns each mode takes (the median counts)")
    ap.add_argument("--attr-turns", type=int, default=50,
                    help="turns of the direct count and of the in-run bare span, taken in alternation")
    ap.add_argument("--flush-each-turn", action="store_true",
                    help="end each assay turn of the direct count with a flush (a file per turn) instead of "
                         "leaving files to the exporter's own policy (OTEL_ASSAY_FLUSH_SECONDS / _ROWS)")
    a = ap.parse_args()
    for flag in ("runs", "rounds", "repeat", "attr_turns"):
        if getattr(a, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as lake:
        r = measure(a.runs, a.rounds, a.repeat, a.attr_turns, lake, a.flush_each_turn)
    m, steps = r["median"], r["steps"]
    bare = m["bare"]
    added = (m["assay"] - bare) / steps
    span = m["span"]
    noop_added = (m["noop"] - bare) / steps
    line = {
        "bench": "capture_langgraph",
        "steps_per_run": steps, "runs_per_turn": a.runs, "turns": a.repeat,
        "bare_run_ms": round(bare * 1e3, 3),
        "assay_run_ms": round(m["assay"] * 1e3, 3),
        "assay_added_us_per_step": round(added * 1e6, 2),
        "bare_sdk_span_us": round(span * 1e6, 2),
        "ratio_vs_bare_span": round(added / span, 2),
        "target_ratio_max": 2.0,
        "spans_produced": r["spans_produced"], "spans_written": r["spans_written"],
        # what any callback handler costs before it does anything: LangChain's dispatch
        "noop_handler_added_us_per_step": round(noop_added * 1e6, 2),
        "assay_added_beyond_dispatch_us_per_step": round((added - noop_added) * 1e6, 2),
        "ratio_beyond_dispatch_vs_bare_span": round((added - noop_added) / span, 2),
    }
    attributed = r["attributed"]
    total = sum(attributed.values())
    in_run = r["bare_span_in_run"]
    att_gc, in_run_gc = r["attributed_gc"], r["bare_span_in_run_gc"]
    line.update({"attributed_us_per_step": round(total * 1e6, 2),
                 "attributed_breakdown_us": {k: round(v * 1e6, 2) for k, v in attributed.items()},
                 "ratio_attributed_vs_bare_span": round(total / span, 2),
                 "bare_span_in_run_us_per_step": round(in_run * 1e6, 2),
                 "ratio_attributed_vs_bare_span_in_run": round(total / in_run, 2),
                 "attr_turns": a.attr_turns,
                 # the exporter's cost on the agent's thread: BatchSpanProcessor.on_end, a queue append
                 "export_on_agent_thread_us_per_span": round(r["export_enqueue_per_span"] * 1e6, 3),
                 "export_on_agent_thread_spans": r["export_enqueue_spans"],
                 "target_export_on_agent_thread_us_max": 5.0,
                 "attributed_files": "each turn" if a.flush_each_turn else "exporter policy",
                 "attributed_spans_per_file": r["attributed_spans_per_file"],
                 "attributed_gc_us_per_step": round(att_gc * 1e6, 2),
                 "bare_span_in_run_gc_us_per_step": round(in_run_gc * 1e6, 2),
                 "full_collections": r["full_collections"],
                 "ratio_attributed_vs_bare_span_in_run_excluding_gc": round((total - att_gc) / (in_run - in_run_gc), 2)})
    turns_gc = r["gc_in_turns"]
    gc_added = {m: turns_gc[m] - turns_gc["bare"] for m in ("assay", "in_run")}
    line.update({"gc_in_turns_us_per_step": {m: round(v * 1e6, 2) for m, v in turns_gc.items()},
                 "gc_added_us_per_step": {m: round(v * 1e6, 2) for m, v in gc_added.items()},
                 "ratio_gc_by_mode": round((total - att_gc + gc_added["assay"])
                                           / (in_run - in_run_gc + gc_added["in_run"]), 2)})
    if "oi" in m:
        oi_added = (m["oi"] - bare) / steps
        line.update({"openinference_run_ms": round(m["oi"] * 1e3, 3),
                     "openinference_added_us_per_step": round(oi_added * 1e6, 2),
                     "ratio_assay_vs_openinference": round(added / oi_added, 2) if oi_added > 0 else None,
                     "target_ratio_vs_openinference_max": 0.25})
    print(json.dumps(line))


if __name__ == "__main__":
    main()
