"""Runs real LangGraph / LangChain agents with a scripted offline chat model, inside
otel_assay trials (last, chat models that call other chat models); the test reads the lake
afterwards. Usage: langgraph_run.py [order] where order is "auto-first" (import
otel_assay.auto before langgraph, default) or "auto-last" (after)."""

import sys

ORDER = sys.argv[1] if len(sys.argv) > 1 else "auto-first"
if ORDER == "auto-first":
    import otel_assay.auto  # noqa: F401

import asyncio
import threading

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

if ORDER == "auto-last":
    import otel_assay.auto  # noqa: F401,E402

import otel_assay  # noqa: E402


@tool
def add(a: int, b: int) -> int:
    """Add two ints."""
    return a + b


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: 2 items, paid"


@tool
def refund(order_id: str) -> str:
    """Refund an order."""
    raise RuntimeError(f"refund service down for {order_id}")


class ScriptedChat(GenericFakeChatModel):
    def bind_tools(self, tools, **kw):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools])


def call(name, args, cid, it=11, ot=7):
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": cid, "type": "tool_call"}],
                     usage_metadata={"input_tokens": it, "output_tokens": ot, "total_tokens": it + ot},
                     response_metadata={"model_name": "scripted-1", "finish_reason": "tool_calls"})


def text(t, it=20, ot=5):
    return AIMessage(content=t, usage_metadata={"input_tokens": it, "output_tokens": ot, "total_tokens": it + ot},
                     response_metadata={"model_name": "scripted-1", "finish_reason": "stop"})


def react_graph(turns, tools, name, handle_errors=True, model=None, is_async=False):
    model = (model or ScriptedChat(messages=iter(turns))).bind_tools(tools)

    async def agent(s):
        return {"messages": [await model.ainvoke(s["messages"])]}
    g = StateGraph(MessagesState)
    g.add_node("agent", agent if is_async else lambda s: {"messages": [model.invoke(s["messages"])]})
    g.add_node("tools", ToolNode(tools, handle_tool_errors=handle_errors))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(name=name)


def q(s):
    return {"messages": [HumanMessage(s)]}


# 1. multi-step tool use
app = react_graph([call("add", {"a": 2, "b": 3}, "call_1"), call("add", {"a": 5, "b": 10}, "call_2", 30, 9),
                   text("The answer is 15")], [add], "calc")
with otel_assay.trial("multi-step", version="v1") as t:
    out = app.invoke(q("what is 2+3+10?"))
    t.outcome(passed="15" in out["messages"][-1].content, score=1.0)

# 2. a tool error handled by ToolNode (the agent recovers)
app = react_graph([call("lookup_order", {"order_id": "A1"}, "c1"), call("refund", {"order_id": "A1"}, "c2"),
                   text("Sorry, refunds are down")], [lookup_order, refund], "support")
with otel_assay.trial("tool-error-handled", version="v1") as t:
    out = app.invoke(q("refund A1"))
    t.outcome(passed="refund" in out["messages"][-1].content.lower())

# 3. a tool error raised through the graph: the trial fails and the error re-raises
app = react_graph([call("refund", {"order_id": "B2"}, "c9")], [refund], "support", handle_errors=False)
try:
    with otel_assay.trial("tool-error-raised", version="v1"):
        app.invoke(q("refund B2"))
except RuntimeError as e:
    print("re-raised:", e)
else:
    raise SystemExit("the trial swallowed the exception")

# 4. multi-agent: a supervisor graph with two worker subgraphs
researcher = react_graph([call("lookup_order", {"order_id": "C3"}, "r1"), text("C3 is paid")],
                         [lookup_order], "researcher")
calculator = react_graph([call("add", {"a": 1, "b": 1}, "k1"), text("2")], [add], "calculator")
sup = StateGraph(MessagesState)
sup.add_node("research", researcher)
sup.add_node("calculate", calculator)
sup.add_edge(START, "research")
sup.add_edge("research", "calculate")
supervisor = sup.compile(name="supervisor")
with otel_assay.trial("multi-agent", version="v1") as t:
    out = supervisor.invoke(q("check C3 and add 1+1"))
    t.outcome(passed=out["messages"][-1].content == "2")

# 5. async (ainvoke) and streaming
app = react_graph([call("add", {"a": 1, "b": 2}, "a1"), text("3")], [add], "calc")


async def run_async():
    async with otel_assay.trial("async", version="v1") as t:
        out = await app.ainvoke(q("1+2"))
        t.outcome(passed=out["messages"][-1].content == "3")


asyncio.run(run_async())


# steps cut off by cancellation get no LangChain callback; they are still recorded (failed)
@tool
async def slow_lookup(order_id: str) -> str:
    """Look up an order in a slow system."""
    await asyncio.sleep(30)
    return "never"


class SlowChat(ScriptedChat):
    async def _agenerate(self, *a, **kw):
        await asyncio.sleep(30)
        return await super()._agenerate(*a, **kw)


async def timeout_mid_tool():
    app = react_graph([call("slow_lookup", {"order_id": "T1"}, "st1"), text("late")], [slow_lookup], "slow",
                      is_async=True)
    try:
        async with otel_assay.trial("timeout-mid-tool", version="v1"):
            await asyncio.wait_for(app.ainvoke(q("where is T1?")), 3)  # well after the tool started
    except asyncio.TimeoutError:
        pass


async def node_slow_tool(s):
    await slow_lookup.ainvoke({"order_id": "F1"})
    return {}


async def node_slow_model(s):
    await SlowChat(messages=iter([text("x")])).ainvoke(s["messages"])
    return {}


async def node_fails(s):
    await asyncio.sleep(1.5)  # the other nodes are inside their calls by then
    raise RuntimeError("node b failed")


async def fan_out_cancelled():
    g = StateGraph(MessagesState)
    for name, fn in (("a_tool", node_slow_tool), ("a_model", node_slow_model), ("b", node_fails)):
        g.add_node(name, fn)
        g.add_edge(START, name)
    try:
        async with otel_assay.trial("fan-out-cancelled", version="v1"):
            await g.compile(name="fanout").ainvoke(q("x"))
    except RuntimeError:
        pass


asyncio.run(timeout_mid_tool())
asyncio.run(fan_out_cancelled())

app = react_graph([call("add", {"a": 4, "b": 4}, "s1"), text("8")], [add], "calc")
with otel_assay.trial("stream", version="v1") as t:
    chunks = list(app.stream(q("4+4"), stream_mode="updates"))
    t.outcome(passed=len(chunks) == 3)

# 6. the agent runs in a thread the application starts inside the trial; a tool fans out to
#    a thread pool where "foreign" instrumentation (another tracer) creates a span
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from opentelemetry import trace  # noqa: E402

_pool = ThreadPoolExecutor(2)


def _http_get(url):
    with trace.get_tracer("foreign.http").start_as_current_span(f"GET {url}"):
        return "200"


@tool
def fetch(url: str) -> str:
    """Fetch a URL."""
    return _pool.submit(_http_get, url).result()


app = react_graph([call("fetch", {"url": "/status"}, "t1"), text("ok")], [fetch], "fetcher")
with otel_assay.trial("thread", version="v1") as t:
    box = {}
    th = threading.Thread(target=lambda: box.update(out=app.invoke(q("status?"))))
    th.start()
    th.join()
    t.outcome(passed=box["out"]["messages"][-1].content == "ok")



# a hand-recorded step inside a LangGraph tool is the tool span's child
@otel_assay.step(kind="tool")
def check_stock(sku):
    return "in stock"


@tool
def availability(sku: str) -> str:
    """Check availability."""
    return check_stock(sku)


app = react_graph([call("availability", {"sku": "S1"}, "v1"), text("yes")], [availability], "stock")
with otel_assay.trial("step-in-tool", version="v1") as t:
    t.outcome(passed=app.invoke(q("in stock?"))["messages"][-1].content == "yes")

# 7. index auto-increments per (scenario, version); an explicit run id
for i in range(3):
    app = react_graph([text(f"hello {i}")], [add], "greeter")
    with otel_assay.trial("repeat", version="v2", run_id="run-fixed") as t:
        app.invoke(q("hi"))
        t.outcome(passed=i != 1)

# 8. langchain.agents.create_agent (the prebuilt agent) also works
from langchain.agents import create_agent  # noqa: E402

agent = create_agent(ScriptedChat(messages=iter([call("add", {"a": 20, "b": 22}, "p1"), text("42")])),
                     tools=[add], name="prebuilt")
with otel_assay.trial("create-agent", version="v1") as t:
    out = agent.invoke(q("20+22"))
    t.outcome(passed=out["messages"][-1].content == "42")


# 9. chat models calling chat models: one model call is one chat span, whoever makes it
import contextvars  # noqa: E402
from functools import partial, reduce  # noqa: E402
from operator import add as concat  # noqa: E402
from typing import Any  # noqa: E402

from langchain_core.callbacks import CallbackManager  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessageChunk  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult  # noqa: E402


class GuardedChat(BaseChatModel):
    """A chat model around another one (composition), as users write them: the inner model
    answers, asked again when its answer is empty; with a store, a conversation seen before
    is answered from it without the inner model. The inner call either takes the context's
    config (a plain invoke) or is made a child run of this one ("child"), possibly in an
    empty context ("no_context", as in a thread nothing carries the context into)."""

    inner: Any
    model_name: str = "guard-1"
    child: bool = False
    no_context: bool = False
    store: Any = None

    @property
    def _llm_type(self):
        return "guarded"

    def bind_tools(self, tools, **kw):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools])

    def _config(self, run_manager):
        if not self.child:
            return None
        return {"callbacks": CallbackManager(handlers=run_manager.handlers,
                                             inheritable_handlers=run_manager.inheritable_handlers,
                                             parent_run_id=run_manager.run_id)}

    def _ask(self, messages, run_manager, **kw):
        ask = partial(self.inner.invoke, messages, self._config(run_manager), **kw)
        return contextvars.Context().run(ask) if self.no_context else ask()

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        key = repr([(m.type, m.content) for m in messages])
        if self.store is not None and key in self.store:
            return ChatResult(generations=[ChatGeneration(message=self.store[key])])
        msg = self._ask(messages, run_manager, stop=stop, **kw)
        if not (msg.content or msg.tool_calls):
            msg = self._ask(messages, run_manager, stop=stop, **kw)
        if self.store is not None:
            self.store[key] = msg
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _agenerate(self, messages, stop=None, run_manager=None, **kw):
        msg = await self.inner.ainvoke(messages, stop=stop, **kw)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _stream(self, messages, stop=None, run_manager=None, **kw):
        for chunk in self.inner.stream(messages, self._config(run_manager), stop=stop, **kw):
            yield ChatGenerationChunk(message=chunk)


class StreamingChat(ScriptedChat):
    """Streams each scripted answer in two pieces, the usage with the last."""

    def _stream(self, messages, stop=None, run_manager=None, **kw):
        msg = next(self.messages)
        half = len(msg.content) // 2
        for piece, last in ((msg.content[:half], False), (msg.content[half:], True)):
            chunk = ChatGenerationChunk(message=AIMessageChunk(
                content=piece, usage_metadata=msg.usage_metadata if last else None,
                response_metadata=msg.response_metadata if last else {}))
            if run_manager:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


def turns():
    return [call("add", {"a": 2, "b": 3}, "g1"), text("5")]


def one_node_graph(node, name):
    g = StateGraph(MessagesState)
    g.add_node("agent", node)
    g.add_edge(START, "agent")
    return g.compile(name=name)


def run(scenario, app, expect="5", is_async=False):
    if is_async:
        async def go():
            async with otel_assay.trial(scenario, version="v1") as t:
                out = await app.ainvoke(q("2+3?"))
                t.outcome(passed=out["messages"][-1].content == expect)
        asyncio.run(go())
        return
    with otel_assay.trial(scenario, version="v1") as t:
        out = app.invoke(q("2+3?"))
        t.outcome(passed=out["messages"][-1].content == expect)


def guarded(inner_turns, **kw):
    return GuardedChat(inner=ScriptedChat(messages=iter(inner_turns)), **kw)


run("wrapped", react_graph(None, [add], "guarded", model=guarded(turns())))
run("wrapped-child", react_graph(None, [add], "guarded", model=guarded(turns(), child=True)))
run("wrapped-child-no-context", react_graph(None, [add], "guarded", model=guarded(turns(), child=True, no_context=True)))
run("wrapped-async", react_graph(None, [add], "guarded", model=guarded(turns()), is_async=True), is_async=True)
run("wrapped-retry", react_graph(None, [add], "guarded",
                                 model=guarded([call("add", {"a": 2, "b": 3}, "g1"), text("", 3, 0), text("5")])))
store: dict = {}
run("wrapped-cache-miss", react_graph(None, [add], "guarded", model=guarded(turns(), store=store)))
run("wrapped-cache-hit", react_graph(None, [add], "guarded", model=guarded([], store=store)))


class DownChat(ScriptedChat):
    def _generate(self, messages, stop=None, run_manager=None, **kw):
        raise ConnectionError("model down")


try:  # one failed model call
    run("wrapped-error", react_graph(None, [add], "guarded", model=GuardedChat(inner=DownChat(messages=iter([])))))
except ConnectionError:
    pass
else:
    raise SystemExit("the model call did not fail")

streamed = GuardedChat(inner=StreamingChat(messages=iter([text("5")])))
run("wrapped-stream", one_node_graph(lambda s: {"messages": [reduce(concat, streamed.stream(s["messages"]))]}, "guarded"))

# not nested: a model call made between the chunks of a stream, and calls started together
answer, judge = StreamingChat(messages=iter([text("5")])), ScriptedChat(messages=iter([text("fine", 4, 1)]))


def stream_and_judge(s):
    chunks = []
    for chunk in answer.stream(s["messages"]):
        chunks.append(chunk)
        if len(chunks) == 1:
            judge.invoke([HumanMessage("is a partial answer fine?")])
    return {"messages": [reduce(concat, chunks)]}


run("stream-interleaved", one_node_graph(stream_and_judge, "judged"))
together = ScriptedChat(messages=iter([text("5", 1, 1), text("5", 2, 1), text("5", 3, 1), text("5", 4, 1)]))


def batch_and_generate(s):
    together.batch([s["messages"], s["messages"]])
    return {"messages": [together.generate([s["messages"], s["messages"]]).generations[1][0].message]}


run("batch", one_node_graph(batch_and_generate, "batched"))

# 10. a tool returning a Command (a handoff, a state update): its result is the ToolMessage it carries
from typing import Annotated  # noqa: E402

from langchain_core.messages import ToolMessage  # noqa: E402
from langchain_core.tools import InjectedToolCallId  # noqa: E402
from langgraph.types import Command  # noqa: E402


@tool
def set_priority(level: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
    """Set the ticket priority."""
    return Command(update={"messages": [ToolMessage(f"priority set to {level}", tool_call_id=tool_call_id)]})


app = react_graph([call("set_priority", {"level": "high"}, "cmd1"), text("done")], [set_priority], "triage")
with otel_assay.trial("command-tool", version="v1") as t:
    t.outcome(passed=app.invoke(q("urgent!"))["messages"][-1].content == "done")


# 11. a tool and a model called on their own (no graph) and cut off by a timeout: recorded failed
#     (CancelledError), by their error callback (langchain-core >= 1.8) or else by the end of the
#     trial; a stream the caller stops reading is no failure
async def cut_off_direct():
    async with otel_assay.trial("cut-off-direct", version="v1") as t:
        for aw in (slow_lookup.ainvoke({"order_id": "D1"}), SlowChat(messages=iter([text("x")])).ainvoke("hi")):
            try:
                await asyncio.wait_for(aw, 0.5)
            except asyncio.TimeoutError:
                pass
        try:  # cut off in the trial's own task, then asked again there
            async with asyncio.timeout(0.5):
                await SlowChat(messages=iter([text("x")])).ainvoke("hi")
        except TimeoutError:
            pass
        await ScriptedChat(messages=iter([text("retried", 4, 1)])).ainvoke("hi again")
        t.outcome(passed=False)


asyncio.run(cut_off_direct())
with otel_assay.trial("stream-stopped", version="v1") as t:
    for chunk in StreamingChat(messages=iter([text("hello world")])).stream("hi"):
        break
    t.outcome(passed=True)

# 12. a tool asking a human (interrupt()) and resumed: the interrupted call is no failure
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.types import interrupt  # noqa: E402


@tool
def approved_refund(order_id: str) -> str:
    """Refund an order once a human approves."""
    return f"refunded {order_id}" if interrupt(f"refund {order_id}?") == "yes" else "declined"


hitl_model = ScriptedChat(messages=iter([call("approved_refund", {"order_id": "H1"}, "h1"), text("done")]))
g = StateGraph(MessagesState)
g.add_node("agent", lambda s: {"messages": [hitl_model.bind_tools([approved_refund]).invoke(s["messages"])]})
g.add_node("tools", ToolNode([approved_refund]))
g.add_edge(START, "agent")
g.add_conditional_edges("agent", tools_condition)
g.add_edge("tools", "agent")
hitl = g.compile(name="hitl", checkpointer=InMemorySaver())
with otel_assay.trial("interrupt-in-tool", version="v1") as t:
    hitl.invoke(q("refund H1"), {"configurable": {"thread_id": "h"}})
    out = hitl.invoke(Command(resume="yes"), {"configurable": {"thread_id": "h"}})
    t.outcome(passed=out["messages"][-1].content == "done")

# 13. a model whose llm_output carries its usage as an object, not a dict: still its step
class UsageObject:
    prompt_tokens, completion_tokens = 6, 2


class ObjectUsageChat(BaseChatModel):
    @property
    def _llm_type(self):
        return "object-usage"

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        return ChatResult(generations=[ChatGeneration(message=AIMessage("ok"))],
                          llm_output={"token_usage": UsageObject(), "model_name": "object-1"})


with otel_assay.trial("usage-object", version="v1") as t:
    t.outcome(passed=ObjectUsageChat().invoke("hi").content == "ok")

# 14. runnables inside a node (prompt | model | parser, a retry wrapper) are no agent steps;
# a graph invoked inside a node is one
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402

lcel = (ChatPromptTemplate.from_messages([("human", "{q}")])
        | ScriptedChat(messages=iter([text("first")])).with_retry() | StrOutputParser())
inner = StateGraph(MessagesState)
inner.add_node("inner_node", lambda s: {"messages": [ScriptedChat(messages=iter([text("5")])).invoke(s["messages"])]})
inner.add_edge(START, "inner_node")
inner_app = inner.compile(name="inner_graph")
g = StateGraph(MessagesState)
g.add_node("agent", lambda s: {"messages": [AIMessage(lcel.invoke({"q": "x"}))]})
g.add_node("delegate", lambda s: {"messages": inner_app.invoke(s)["messages"][-1:]})
g.add_edge(START, "agent")
g.add_edge("agent", "delegate")
run("lcel-in-node", g.compile(name="outer_graph"))

# 15. a node that looks documents up with a retriever (RAG), once successfully, once failing
from langchain_core.documents import Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402


class Docs(BaseRetriever):
    fail: bool = False

    def _get_relevant_documents(self, query, *, run_manager=None):
        if self.fail:
            raise ConnectionError("vector store down")
        return [Document("Refunds take 5 days.", id="kb-1", metadata={"score": 0.9}),
                Document("Refunds need a receipt.", id="kb-2")]


def rag_graph(retriever):
    def answer(s):
        docs = retriever.invoke(s["messages"][-1].content)
        return {"messages": [ScriptedChat(messages=iter([text(str(len(docs)))])).invoke(s["messages"])]}
    return one_node_graph(answer, "rag")


run("rag", rag_graph(Docs()), expect="2")
try:
    run("rag-down", rag_graph(Docs(fail=True)))
except ConnectionError:
    pass

# 16. the model garbles a tool call's arguments: LangChain files it under invalid_tool_calls,
# the graph ends without running a tool, and the turn is no answer
garbled = AIMessage(content="", invalid_tool_calls=[{"name": "add", "args": '{"a": 2, "b": ', "id": "bad1",
                                                     "error": "Expecting value", "type": "invalid_tool_call"}])
run("invalid-tool-call", react_graph([garbled], [add], "calc"))

print("stats", otel_assay.capture._runtime.stats() if hasattr(otel_assay, "capture") else None)
assert otel_assay.flush()
print("done")
