"""Trial lifecycle edge cases with a real LangGraph agent and a scripted offline model; argv[1]:

* ``fork``: trials in multiprocessing children forked after instrumenting (Pool, Process);
* ``misuse``: a trial entered twice, an outcome set after the trial ended;
* ``stream``: a graph stream the caller stops reading (explicit trial; with
  OTEL_ASSAY_SCENARIO set, the implicit trial of the invocation);
* ``threads``: threads first started inside a trial that outlive it;
* ``interrupt``: graph invocations paused for a human (interrupt() in a node, an
  interrupt_before breakpoint) and their resumes, under OTEL_ASSAY_SCENARIO and in a trial.
"""

import sys

import otel_assay.auto  # noqa: F401

import multiprocessing as mp  # noqa: E402
import os  # noqa: E402
import queue  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from multiprocessing.pool import ThreadPool  # noqa: E402

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

import otel_assay  # noqa: E402
from otel_assay.capture import _runtime  # noqa: E402
from otel_assay.capture.trial import current_trial  # noqa: E402

MODE = sys.argv[1]


@tool
def add(a: int, b: int) -> int:
    """Add two ints."""
    return a + b


class Scripted(GenericFakeChatModel):
    def bind_tools(self, tools, **kw):
        return self


def app(rounds=1):
    calls = [AIMessage(content="", tool_calls=[{"name": "add", "args": {"a": i, "b": 1}, "id": f"c{i}",
                                               "type": "tool_call"}],
                       usage_metadata={"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
                       response_metadata={"model_name": "scripted-1"}) for i in range(rounds)]
    m = Scripted(messages=iter(calls + [AIMessage(content="done", response_metadata={"model_name": "scripted-1"})]))
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda s: {"messages": [m.invoke(s["messages"])]})
    g.add_node("tools", ToolNode([add]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(name="calc")


def q():
    return {"messages": [HumanMessage("add")]}


def one_trial(scenario, index=None):
    with otel_assay.trial(scenario, version="v1", index=index) as t:
        app().invoke(q())
        t.outcome(passed=True)


def pool_job(i):
    one_trial("pool")  # auto index: the same in every worker
    return os.getpid()


def process_job(flush_between):
    one_trial("process")
    if flush_between:
        otel_assay.flush()  # must not write the parent's buffered spans again
        one_trial("process")


def age_job():
    ex = _runtime.pipeline().exporter
    if _runtime.pipeline().kind == "parquet":
        ex.max_age_s = 0.1
    one_trial("age")
    deadline = time.monotonic() + (10 if _runtime.pipeline().kind == "parquet" else 2.5)
    while getattr(ex, "files_written", 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # (OTLP: the BatchSpanProcessor's thread exports every second)
    os._exit(0)  # no exit hook at all: only the child's own flush thread can have written the trial


def hitl_app(how, name="calc"):
    """calc, asking a human before its tool runs: ``node`` (interrupt() in an approve node) or
    ``before`` (an interrupt_before breakpoint on the tools node); ``none`` asks nobody."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END
    from langgraph.types import interrupt

    m = Scripted(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "add", "args": {"a": 1, "b": 1}, "id": "c0", "type": "tool_call"}],
                  response_metadata={"model_name": "scripted-1"}),
        AIMessage(content="done", response_metadata={"model_name": "scripted-1"})]))
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda s: {"messages": [m.invoke(s["messages"])]})
    g.add_node("tools", ToolNode([add]))
    g.add_edge(START, "agent")
    g.add_edge("tools", "agent")
    if how == "node":
        def approve(s):
            interrupt("run the tool?")
            return {}
        g.add_node("approve", approve)
        g.add_conditional_edges("agent", tools_condition, {"tools": "approve", END: END})
        g.add_edge("approve", "tools")
        return g.compile(name=name, checkpointer=InMemorySaver())
    g.add_conditional_edges("agent", tools_condition)
    return g.compile(name=name, checkpointer=InMemorySaver(), interrupt_before=["tools"] if how == "before" else None)


if MODE == "fork":
    one_trial("parent")  # still buffered (OTEL_ASSAY_FLUSH_SECONDS is large) when the children fork
    ctx = mp.get_context("fork")
    with ctx.Pool(2) as pool:  # __exit__ terminates the workers: no exit hook runs in them
        pids = pool.map(pool_job, range(4), chunksize=1)
    print("POOL WORKERS", len(set(pids)))
    for target, args in ((process_job, (False,)), (process_job, (True,)), (age_job, ())):
        p = ctx.Process(target=target, args=args)
        p.start()
        p.join()
        assert p.exitcode == 0, p.exitcode
    print("FLUSHED", otel_assay.flush())

elif MODE == "misuse":
    tr = otel_assay.trial("reused", version="v1")
    try:
        tr.outcome(passed=False)
    except RuntimeError as e:
        print("EARLY OUTCOME", e)
    with tr as t:
        app().invoke(q())
        t.outcome(passed=True)
    try:
        with tr:
            pass
    except RuntimeError as e:
        print("REENTER", e)
    try:
        t.outcome(passed=False)
    except RuntimeError as e:
        print("LATE OUTCOME", e)
    from opentelemetry import trace
    print("CURRENT SPAN VALID", trace.get_current_span().get_span_context().is_valid)
    print("FLUSHED", otel_assay.flush())

elif MODE == "stream":
    if not os.environ.get("OTEL_ASSAY_SCENARIO"):
        with otel_assay.trial("stream-break", version="v1") as t:
            for _ in app(rounds=3).stream(q(), stream_mode="updates"):
                break
            t.outcome(passed=True)
        with otel_assay.trial("stream-close", version="v1") as t:
            gen = app(rounds=3).stream(q(), stream_mode="updates")
            next(gen)
            gen.close()
            t.outcome(passed=True)
    else:
        for _ in app(rounds=3).stream(q(), stream_mode="updates"):
            break
    print("FLUSHED", otel_assay.flush())

elif MODE == "threads":
    @otel_assay.step(kind="tool")
    def work(tag):
        return current_trial() is not None

    jobs: queue.Queue = queue.Queue()

    def serve():  # a library's lazily started worker: lives forever
        while True:
            tag, out = jobs.get()
            out.put(work(tag))

    tp = None
    for i in range(2):
        with otel_assay.trial("threads", version="v1", index=i) as t:
            if tp is None:
                tp = ThreadPool(1)
                threading.Thread(target=serve, daemon=True).start()
            tp.apply(work, (f"tp-{i}",))
            out: queue.Queue = queue.Queue()
            jobs.put((f"bg-{i}", out))
            print("BG IN TRIAL", i, out.get())
            th = threading.Thread(target=work, args=(f"thread-{i}",))
            th.start()
            th.join()
            t.outcome(passed=True)
    out = queue.Queue()
    jobs.put(("bg-after", out))
    print("BG AFTER TRIALS", out.get())
    tp.close()
    tp.join()
    print("FLUSHED", otel_assay.flush())

elif MODE == "interrupt":
    import asyncio

    from langgraph.types import Command

    def thread(name):
        return {"configurable": {"thread_id": name}}

    # each top-level invocation is an implicit trial: the paused one, then its resume
    app_ = hitl_app("node")
    assert "__interrupt__" in app_.invoke(q(), thread("node"))
    assert app_.invoke(Command(resume="yes"), thread("node"))["messages"][-1].content == "done"

    async def breakpoint_then_resume():
        a = hitl_app("before")
        await a.ainvoke(q(), thread("before"))
        assert (await a.aget_state(thread("before"))).next == ("tools",)
        return await a.ainvoke(None, thread("before"))

    assert asyncio.run(breakpoint_then_resume())["messages"][-1].content == "done"
    assert hitl_app("none").invoke(q(), thread("none"))["messages"][-1].content == "done"
    # the pause and its resume inside one explicit trial: the caller's verdict
    del os.environ["OTEL_ASSAY_SCENARIO"]
    with otel_assay.trial("hitl-trial", version="v1") as t:
        app_ = hitl_app("node")
        app_.invoke(q(), thread("trial"))
        t.outcome(passed=app_.invoke(Command(resume="yes"), thread("trial"))["messages"][-1].content == "done")
    print("FLUSHED", otel_assay.flush())

elif MODE == "resume-keys":
    from langgraph.types import Command

    def thread(name):
        return {"configurable": {"thread_id": name}}

    # thread ids are per checkpointer ("1" in every tutorial): another graph on the same id,
    # or fresh input instead of an answer, is no resume
    paused = hitl_app("node")
    paused.invoke(q(), thread("1"))
    hitl_app("none", name="other").invoke(q(), thread("1"))
    assert paused.invoke(Command(resume="yes"), thread("1"))["messages"][-1].content == "done"
    restarted = hitl_app("node")
    restarted.invoke(q(), thread("2"))
    restarted.invoke(q(), thread("2"))
    print("FLUSHED", otel_assay.flush())

else:
    raise SystemExit(f"unknown mode {MODE}")
