"""Framework-free capture scenarios, one per mode (argv[1]); each runs in a fresh process."""

import asyncio
import json
import sys
import threading

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
    n_ours = sum(1 for p in tp._active_span_processor._span_processors
                 if type(p).__module__.startswith("otel_assay"))
    print("OUR_PROCESSORS", n_ours)

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

elif MODE == "uninstrument":
    import otel_assay
    print("ACTIVE", otel_assay.instrument(["langgraph"]))
    otel_assay.uninstrument()
    with otel_assay.trial("after-uninstrument"):
        pass
    otel_assay.flush()
else:
    raise SystemExit(f"unknown mode {MODE}")
