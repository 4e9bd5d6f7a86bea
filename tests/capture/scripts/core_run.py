"""Framework-free capture scenarios, one per mode (argv[1]); each runs in a fresh process."""

import asyncio
import contextvars
import json
import sys
import threading
import time

MODE = sys.argv[1]


def app_provider():
    """An application's own SDK provider with its own (in-memory) exporter."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    tp = TracerProvider()
    mem = InMemorySpanExporter()
    tp.add_span_processor(SimpleSpanProcessor(mem))
    trace.set_tracer_provider(tp)
    return tp, mem


if MODE == "generic":
    import otel_assay

    @otel_assay.step(kind="tool")
    def lookup(order_id: str, verbose: bool = False) -> dict:
        return {"order": order_id, "paid": True}

    @otel_assay.step(kind="tool", name="charge_card")
    async def charge(amount: float) -> str:
        raise ValueError(f"card declined for {amount}")

    @otel_assay.step(kind="llm", model="gpt-test", provider="openai")
    def think(prompt):
        return "ok"

    with otel_assay.trial("generic", version="v9") as t:
        with otel_assay.step("support-bot", kind="agent"):
            think("hi")
            lookup("A7")
            try:
                asyncio.run(charge(12.5))
            except ValueError:
                pass
            with otel_assay.step("plan-refund", kind="reason"):
                pass
            with otel_assay.step("check-policy"):  # kind "other", the default
                pass
            with otel_assay.step("gpt-test", kind="llm", model="gpt-test", provider="openai") as s:
                s.usage(input_tokens=40, output_tokens=12, finish_reasons=["stop"])
                s.result("Refund issued")
            with otel_assay.step("answer", kind="respond") as s:
                s.result("Refund issued")
        t.outcome(passed=True, score=0.75)
    # exception escaping the block: trial failed, error class set, exception re-raised
    try:
        with otel_assay.trial("generic-crash", version="v9"):
            raise KeyError("missing")
    except KeyError:
        print("re-raised")
    try:
        with otel_assay.trial("generic-timeout", version="v9"):
            raise TimeoutError("too slow")
    except TimeoutError:
        pass
    with otel_assay.trial("generic-labelled", version="v9", index=41) as t:
        t.outcome(passed=False, error_class="pre-validation")
    with otel_assay.trial("generic-labelled", version="v9") as t:  # continues after the explicit index
        pass
    assert otel_assay.flush()
    print(json.dumps(otel_assay.capture._runtime.stats()))

elif MODE in ("app-provider-first", "app-provider-after"):
    if MODE == "app-provider-first":
        tp, mem = app_provider()
        import otel_assay.auto  # noqa: F401
    else:
        import otel_assay.auto  # noqa: F401
        tp, mem = app_provider()
    import otel_assay
    import otel_assay.auto  # noqa: F401  (idempotent)
    otel_assay.instrument()
    from opentelemetry import trace
    app_tracer = trace.get_tracer("app")
    with app_tracer.start_as_current_span("http POST /chat"):
        with otel_assay.trial("provider", version="v1") as t:
            with otel_assay.step("lookup", kind="tool"):
                with app_tracer.start_as_current_span("db.query"):
                    pass
            t.outcome(passed=True)
    assert trace.get_tracer_provider() is tp, "the application's provider was replaced"
    otel_assay.flush()
    names = sorted(s.name for s in mem.get_finished_spans())
    print("APP_EXPORTER", json.dumps(names))
    db = next(s for s in mem.get_finished_spans() if s.name == "db.query")
    print("APP_DB_ATTRS", json.dumps({k: v for k, v in db.attributes.items()}))

elif MODE == "disabled":
    import otel_assay.auto  # noqa: F401
    import otel_assay
    with otel_assay.trial("off") as t:
        with otel_assay.step("x", kind="tool"):
            pass
        t.outcome(passed=True)
    print("flushed", otel_assay.flush())

elif MODE == "burst":
    import otel_assay
    n_threads, per = 8, 2500

    def work(i):
        with otel_assay.trial("burst", version="v1", index=i):
            for k in range(per - 1):
                with otel_assay.step(f"t{k % 7}", kind="tool"):
                    pass

    ths = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    [th.start() for th in ths]
    [th.join() for th in ths]
    assert otel_assay.flush()
    print(json.dumps(otel_assay.capture._runtime.stats()))

elif MODE == "atexit":
    import otel_assay
    with otel_assay.trial("atexit", version="v1") as t:
        with otel_assay.step("only", kind="tool"):
            pass
        t.outcome(passed=True)
    # no flush(): the exit hook writes the spans

elif MODE == "otlp":
    import otel_assay
    with otel_assay.trial("otlp", version="v3") as t:
        with otel_assay.step("send", kind="tool", arguments={"x": 1}):
            pass
        t.outcome(passed=True)
    assert otel_assay.flush()
    print(json.dumps(otel_assay.capture._runtime.stats()))

elif MODE == "app-provider-otlp":
    # the application exports its traces over OTLP, configured by OTEL_EXPORTER_OTLP_ENDPOINT
    # (as opentelemetry-instrument does), with no OTEL_ASSAY_* setting; run in the directory argv[2]
    import os
    os.chdir(sys.argv[2])
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(tp)
    import otel_assay.auto  # noqa: F401
    import otel_assay
    with trace.get_tracer("app").start_as_current_span("http POST /chat"):
        with otel_assay.trial("app-otlp", version="v1") as t:
            with otel_assay.step("lookup", kind="tool"):
                pass
            t.outcome(passed=True)
    assert otel_assay.flush() and tp.force_flush()
    print(json.dumps(otel_assay.capture._runtime.stats()))

elif MODE == "uninstrument":
    import otel_assay
    print("ACTIVE", otel_assay.instrument(["langgraph"]))
    otel_assay.uninstrument()
    with otel_assay.trial("after-uninstrument"):
        pass
    otel_assay.flush()
elif MODE == "api-edges":
    import otel_assay

    @otel_assay.step  # no arguments: kind "other", named after the function
    def normalise(text):
        return text.strip()

    @otel_assay.step
    async def fetch(url):
        return "200"

    with otel_assay.trial("bare-step", version=2, run_id=20260101) as t:  # numbers, as users write them
        assert normalise.__name__ == "normalise" and normalise(" x ") == "x"
        assert asyncio.run(fetch("/")) == "200"
        for bad in (float("inf"), float("-inf"), float("nan")):
            try:
                t.outcome(passed=True, score=bad)
            except ValueError as e:
                print("REFUSED", e)
        for bad in ("false", "no", [], 2):
            try:
                t.outcome(passed=bad)
            except TypeError as e:
                print("REFUSED", e)
        import numpy
        t.outcome(passed=numpy.float64(0.2) > 0.5)  # a numpy bool is a bool
        assert t.passed is False
        t.outcome(passed=True)
    for bad in ("3", True, -1):
        try:
            otel_assay.trial("bad-index", index=bad)
        except ValueError as e:
            print("REFUSED", e)
    otel_assay.flush()

elif MODE == "step-shapes":
    import otel_assay
    from opentelemetry import trace

    @otel_assay.step(kind="llm", model="gpt-test")
    def stream_tokens(n):  # a generator: the step lasts as long as its iteration
        for i in range(n):
            with trace.get_tracer("inner").start_as_current_span(f"token {i}"):
                pass
            yield f"t{i}"

    @otel_assay.step(kind="tool")
    async def search(q):  # an async generator
        for i in range(2):
            await asyncio.sleep(0.05)
            yield f"{q}-{i}"

    @otel_assay.step(kind="tool")
    def pages():
        yield 1
        raise ValueError("page 2 is gone")

    db = otel_assay.step("db", kind="tool")  # one factory, entered by two threads at once

    def query():
        with db:
            time.sleep(0.2)

    async def read_search():
        return [x async for x in search("q")]

    with otel_assay.trial("step-shapes") as t:
        for tok in stream_tokens(2):
            with trace.get_tracer("consumer").start_as_current_span(f"show {tok}"):
                time.sleep(0.05)
        assert asyncio.run(read_search()) == ["q-0", "q-1"]
        try:
            list(pages())
        except ValueError:
            pass
        ctx = contextvars.copy_context()
        threads = [threading.Thread(target=ctx.copy().run, args=(query,)) for _ in range(2)]
        [th.start() for th in threads]
        [th.join() for th in threads]
        t.outcome(passed=True)
    otel_assay.flush()

elif MODE == "unsampled":  # the tracer provider's sampler drops every trace (OTEL_TRACES_SAMPLER=always_off)
    import otel_assay
    for i in range(3):
        with otel_assay.trial("unsampled") as t:
            with otel_assay.step("lookup", kind="tool"):
                pass
            t.outcome(passed=True)
    print(json.dumps(otel_assay.capture._runtime.stats()))
elif MODE == "exits":  # sys.exit() and Ctrl-C inside trials: the program stops, the agent did not fail
    import os

    import otel_assay
    from otel_assay.capture.trial import implicit_trial

    def tool_step():
        with otel_assay.step("lookup", kind="tool"):
            pass

    for scenario, exc, passed in (("exit-0", SystemExit(0), True), ("exit-none", SystemExit(None), None),
                                  ("exit-2", SystemExit(2), True), ("ctrl-c", KeyboardInterrupt(), None),
                                  ("ctrl-c-judged", KeyboardInterrupt(), True)):
        try:
            with otel_assay.trial(scenario) as t:
                tool_step()
                if passed is not None:
                    t.outcome(passed=passed)
                raise exc
        except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included
            assert e is exc and e.__traceback__ is not None, e  # the same exception goes on
            print("PROPAGATED", scenario)
    # the implicit trial of an agent invocation that exits or is interrupted (adapters pass the
    # exception the invocation raised): not a passed trial, nor a failed one
    os.environ["OTEL_ASSAY_SCENARIO"] = "implicit"
    for exc in (SystemExit(0), KeyboardInterrupt()):
        t = implicit_trial("agent")
        t.finish(exc)
    del os.environ["OTEL_ASSAY_SCENARIO"]
    # a program ending with sys.exit(0) inside its trial: written at exit, as a passed trial
    with otel_assay.trial("exit-at-end") as t:
        tool_step()
        t.outcome(passed=True)
        sys.exit(0)

else:
    raise SystemExit(f"unknown mode {MODE}")
