"""The per-step cost cut in the LangChain adapter: chat input messages are serialised once
per message object (cached) and joined, and the result is identical to serialising the
whole history. The history's loop runs in C (_capturec) when the extension is built; every
test of it runs on both paths."""

import sys

import pytest


@pytest.fixture(params=["c", "python"])
def history_path(request, monkeypatch):
    """_messages_json on the compiled loop and on the Python loop."""
    pytest.importorskip("langchain_core")
    from otel_assay.capture import langchain

    if request.param == "python":
        monkeypatch.setattr(langchain, "_history_json", None)
    else:
        try:
            from otel_assay.capture._capturec import history_json
        except ImportError:
            pytest.skip("the _capturec extension is not built")
        monkeypatch.setattr(langchain, "_history_json", history_json)
    return request.param


def test_message_json_cache_matches_full_serialisation(history_path):
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from otel_assay.capture._spans import to_json
    from otel_assay.capture.langchain import AssayCallbackHandler, _message_json

    h = AssayCallbackHandler()
    msgs = [HumanMessage("where is A1?"),
            AIMessage("", tool_calls=[{"name": "lookup", "args": {"id": "A1", "n": 2}, "id": "c1",
                                       "type": "tool_call"}]),
            ToolMessage("shipped", tool_call_id="c1"), AIMessage("A1 is shipped ✓")]
    for n in range(1, len(msgs) + 1):
        assert h._messages_json(msgs[:n]) == to_json([_message_json(m) for m in msgs[:n]])
    assert h._messages_json([]) == to_json([])
    msgs[3].content = "changed"                  # a message changed in place is re-serialised
    assert h._messages_json(msgs) == to_json([_message_json(m) for m in msgs])
    msgs[1].tool_calls = [{"name": "other", "args": {}, "id": "c9", "type": "tool_call"}]  # so are its tool calls
    assert h._messages_json(msgs) == to_json([_message_json(m) for m in msgs])
    msgs[0].tool_calls = [{"name": "extra"}]     # an extra field (LangChain messages allow them)
    assert h._messages_json(msgs) == to_json([_message_json(m) for m in msgs])
    assert h._messages_json(iter(msgs)) == h._messages_json(msgs)  # any iterable, as the loop takes


def test_optional_attribute_matches_getattr():
    """_optional skips pydantic's costly attribute miss but sees what getattr sees: fields,
    extras (LangChain messages allow extra fields), properties and plain objects."""
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from otel_assay.capture.langchain import _optional

    class Plain:
        tool_calls = ["class attribute"]

    extra = HumanMessage("hi", tool_calls=[{"name": "x"}])
    for obj in (HumanMessage("hi"), extra, ToolMessage("r", tool_call_id="c"), Plain(), object(),
                AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "1", "type": "tool_call"}])):
        for name in ("tool_calls", "content", "nope"):
            assert _optional(obj, name) == getattr(obj, name, None), (obj, name)
    assert _optional(extra, "tool_calls") == [{"name": "x"}]


def test_output_message_from_the_cache_matches_full_serialisation(history_path):
    """A chat step's output message is built from the answer's cached JSON (which the next
    call's input reuses) with the finish reason put in: the same text as serialising the
    output message whole."""
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage

    from otel_assay.capture._spans import to_json
    from otel_assay.capture.langchain import AssayCallbackHandler, _message_json, _with_finish_reason

    h = AssayCallbackHandler()
    answers = [AIMessage("A1 is shipped ✓"), AIMessage([{"type": "text", "text": "two"}, "parts"]),
               AIMessage("", tool_calls=[{"name": "lookup", "args": {"id": "A1", "é": 2}, "id": "c1", "type": "tool_call"}],
                         invalid_tool_calls=[{"name": "f", "args": "{bad", "id": "c2", "error": "no", "type": "invalid_tool_call"}])]
    for msg in answers:
        for finish in ("stop", "tool_calls", 'od"d ✓'):
            whole = {**_message_json(msg), "finish_reason": finish}
            assert _with_finish_reason(h._cached_json(msg, _message_json), finish) == to_json([whole])
    assert h._messages_json(answers) == to_json([_message_json(m) for m in answers])


class _Dumps:
    def model_dump(self):
        return {"b": 1, "a": {3, 4} and [3]}


class _Text(str):
    pass


def _messages():
    from langchain_core.messages import (AIMessage, AIMessageChunk, ChatMessage, HumanMessage, SystemMessage,
                                         ToolMessage)
    circular: list = []
    circular.append(circular)
    call = {"name": "lookup", "id": "c1", "type": "tool_call"}
    return [
        HumanMessage('where is A1? ✓ "q" \\ \n\t\x01\u2028'), SystemMessage("sys"), HumanMessage(""),
        AIMessage("", tool_calls=[{**call, "args": {"id": "A1", "n": 2, "z": [1, {"b": 1, "a": float("nan")}]}}]),
        AIMessage("thinking", tool_calls=[{**call, "args": {}}, {**call, "id": "c2", "args": {"x": None, "é": -0.0}}]),
        AIMessage("", invalid_tool_calls=[{"name": "f", "args": "{bad", "id": "c2", "error": "no",
                                           "type": "invalid_tool_call"}]),
        AIMessage("", invalid_tool_calls=[{"name": "f", "args": '{"ok": [1, 2], "a": 1}', "id": "c2",
                                           "error": None, "type": "invalid_tool_call"}]),
        AIMessage("", invalid_tool_calls=[{"name": None, "args": None, "id": None, "error": "no",
                                           "type": "invalid_tool_call"}]),
        AIMessage([{"type": "text", "text": "two"}, "parts", {"type": "image_url", "image_url": "x"}]),
        ToolMessage("shipped", tool_call_id="c1"), ToolMessage(["a", {"type": "text", "text": "b"}], tool_call_id="c1"),
        ToolMessage({"k": [1, 2]}, tool_call_id='c\u00e9"1'), ToolMessage("", tool_call_id=""),
        AIMessageChunk(content="chunk"), ChatMessage(content="hi", role="critic"),
        HumanMessage("hi", tool_calls=[{"name": "x"}]), AIMessage("A1 is shipped ✓"),
        # values only the general path takes: objects for the encoder's default, a str subclass,
        # arguments the encoder refuses (a circular list) and a call id that is no string
        AIMessage("", tool_calls=[{**call, "args": {"o": _Dumps(), "s": {1}, "b": b"\xff"}}]),
        AIMessage(_Text("sub")),
        AIMessage("", tool_calls=[{**call, "args": {"loop": circular}}]),
    ]


def test_message_text_matches_the_general_serialisation(history_path):
    """_message_text writes the common message shapes out directly; for every shape, and
    for values only the general path can write, it gives to_json(_message_json(m))."""
    pytest.importorskip("langchain_core")
    from langchain_core.messages import ToolMessage

    from otel_assay.capture._spans import to_json
    from otel_assay.capture.langchain import AssayCallbackHandler, _message_json, _message_text

    msgs = _messages()
    odd_id = ToolMessage("r", tool_call_id="c")
    object.__setattr__(odd_id, "tool_call_id", 7)  # past pydantic's validation, as a hand-made message can be
    msgs.append(odd_id)
    for m in msgs:
        assert _message_text(m) == to_json(_message_json(m)), m
    # (the circular one aside: the whole list of it falls back to one string, each message alone
    # to a string per message, as before)
    joinable = [m for m in msgs if "loop" not in str(m)]
    assert len(joinable) == len(msgs) - 1
    h = AssayCallbackHandler()
    assert h._messages_json(joinable) == to_json([_message_json(m) for m in joinable])
    assert h._messages_json(joinable) == to_json([_message_json(m) for m in joinable])  # from the cache


def test_to_json_is_json_dumps_with_sorted_keys():
    """to_json keeps one encoder instead of json.dumps building one per call: the same text
    for every kind of value, and the same fallback for a value the encoder refuses."""
    import json

    from otel_assay.capture._spans import _default, to_json

    circular: dict = {}
    circular["self"] = circular
    for obj in ({"b": [1, 2.5, None, True], "a": "é\n\"", "c": {"z": 1, "y": float("inf")}}, [_Dumps(), {3}, b"\xfe"],
                (1, 2), 10**30, -0.0, float("nan"), None, {"k": object}, []):
        assert to_json(obj) == json.dumps(obj, default=_default, ensure_ascii=False, sort_keys=True), obj
    assert to_json(circular) == json.dumps(str(circular), ensure_ascii=False)
    assert to_json('{"kept": "as it is"}') == '{"kept": "as it is"}'


class _Raises:
    """A message-like object whose content read raises ``exc``."""

    def __init__(self, exc):
        self.exc = exc

    @property
    def content(self):
        raise self.exc


class _NoContent:
    type = "human"


def test_compiled_history_join_is_the_python_loop():
    """The compiled loop gives what the Python loop gives, leaves the cache as the Python
    loop leaves it, and raises what it raises, for messages of every shape, repeated calls
    (cache hits), objects that are not messages, and reads that fail."""
    pytest.importorskip("langchain_core")
    try:
        from otel_assay.capture._capturec import history_json
    except ImportError:
        pytest.skip("the _capturec extension is not built")
    from otel_assay.capture import langchain
    from otel_assay.capture.langchain import AssayCallbackHandler

    def both(msgs):
        out = []
        for loop in (history_json, None):
            langchain._history_json = loop
            h = AssayCallbackHandler()
            try:
                texts = [h._messages_json(msgs), h._messages_json(msgs), h._messages_json(msgs[:-1] + msgs[-1:])]
                out.append((texts, sorted((k, v[3]) for k, v in h._json_cache.items())))
            except BaseException as e:  # noqa: BLE001 - compared, not handled
                out.append((type(e), str(e)))
            finally:
                langchain._history_json = history_json
        return out

    msgs = [m for m in _messages() if "loop" not in str(m)]
    for n in (0, 1, 3, len(msgs)):
        c, py = both(msgs[:n])
        assert c == py
    c, py = both(msgs + [1, None, "text", _NoContent()])  # not messages: read as getattr reads them
    assert c == py
    for exc in (RuntimeError("content broke"), KeyboardInterrupt(), AttributeError("gone")):
        c, py = both(msgs[:2] + [_Raises(exc)])
        assert c == py, exc
    assert both(msgs[:2] + [_Raises(RuntimeError("x"))])[0] == (RuntimeError, "x")
    assert both(msgs[:2] + [_Raises(AttributeError("gone"))])[0][0][0].endswith('"role": "user"}]')

    # a maker that returns something other than text: join refuses it on both paths
    def odd(h):
        h._new_json = lambda m, content, calls, make: 7
        return h
    for loop in (history_json, None):
        langchain._history_json = loop
        with pytest.raises(TypeError, match="expected str instance, int found"):
            odd(AssayCallbackHandler())._messages_json(msgs[:1])
    langchain._history_json = history_json


def test_compiled_history_join_keeps_no_reference():
    """Every object the compiled loop reads (message, content, tool calls, cached text) has
    the same reference count after a thousand calls as before: no leak, no early free."""
    pytest.importorskip("langchain_core")
    try:
        from otel_assay.capture._capturec import history_json  # noqa: F401
    except ImportError:
        pytest.skip("the _capturec extension is not built")
    from otel_assay.capture.langchain import AssayCallbackHandler

    msgs = [m for m in _messages() if "loop" not in str(m)]
    h = AssayCallbackHandler()
    first = h._messages_json(msgs)
    watched = [o for m in msgs for o in (m, m.content, getattr(m, "tool_calls", None))] + \
        [v for entry in h._json_cache.values() for v in entry]
    watched = [o for o in watched if sys.getrefcount(o) < 1000]  # not None or "": shared by everything
    assert len(watched) > 40
    before = [sys.getrefcount(o) for o in watched]
    for _ in range(1000):
        assert h._messages_json(msgs) == first
    assert [sys.getrefcount(o) for o in watched] == before


def test_to_json_takes_the_c_encoder_only_where_it_is_encode(monkeypatch):
    """to_json calls the C encoder that JSONEncoder.encode builds, without encode()'s Python
    layers, and only where that gives what encode() gives: an encoder of another signature
    or behaviour (another Python) leaves encode() in place."""
    import json

    from otel_assay.capture import _spans

    assert _spans._encode is _spans._c_encode  # CPython 3.11+: the C encoder is there
    circular: list = []
    circular.append(circular)
    for obj in ({"b": [1, 2.5], "a": {"y": float("-inf")}}, "text ✓", 3, None, [_Dumps(), {1}, b"\xff", (1,)]):
        assert _spans._c_encode(obj) == _spans._ENCODER.encode(obj)
    for obj in (circular, {"k": float("nan"), 1: object()}, {(1, 2): 3}):
        with pytest.raises((TypeError, ValueError)) as c:
            _spans._c_encode(obj)
        with pytest.raises(type(c.value), match=str(c.value)[:20].replace("(", r"\(")):
            _spans._ENCODER.encode(obj)
    assert _spans.to_json(circular) == json.dumps(str(circular), ensure_ascii=False)
    monkeypatch.setattr(_spans, "_C_MAKE_ENCODER", lambda *a: (lambda obj, level: ["changed"]))
    assert _spans._encoder() == _spans._ENCODER.encode
    monkeypatch.setattr(_spans, "_C_MAKE_ENCODER", lambda *a: 1 / 0)
    assert _spans._encoder() == _spans._ENCODER.encode
    monkeypatch.setattr(_spans, "_C_MAKE_ENCODER", None)
    assert _spans._encoder() == _spans._ENCODER.encode


def test_compiled_history_join_reads_odd_caches_as_the_python_loop_does():
    """Entries and caches no handler of ours makes (a subclass may), and a _DECLARES edited
    while the history is read: the compiled loop still does what the Python loop does."""
    pytest.importorskip("langchain_core")
    try:
        from otel_assay.capture._capturec import history_json
    except ImportError:
        pytest.skip("the _capturec extension is not built")
    import collections

    from langchain_core.messages import HumanMessage

    from otel_assay.capture import langchain
    from otel_assay.capture.langchain import AssayCallbackHandler

    class Tuple(tuple):
        pass

    class Cache(dict):
        def get(self, k, d=None):
            return ("not", "a", "hit", "x")

    class Msg(HumanMessage):
        @property
        def content_probe(self):
            return self.content

    def run(loop, build):
        saved_declares = dict(langchain._DECLARES)
        langchain._history_json = loop
        try:
            h, msgs = build()
            try:
                out = h._messages_json(msgs)
            except BaseException as e:  # noqa: BLE001 - compared, not handled
                out = (type(e).__name__, str(e))
            index = {id(m): i for i, m in enumerate(msgs)}
            cache = sorted((index[k], v[1:] if isinstance(v, tuple) else v) for k, v in h._json_cache.items()
                           if k in index) if isinstance(h._json_cache, dict) else None
            return out, repr(cache)
        finally:
            langchain._history_json = history_json
            langchain._DECLARES.clear()
            langchain._DECLARES.update(saved_declares)

    def entry(make):
        def build():
            h, m = AssayCallbackHandler(), HumanMessage("hi")
            h._json_cache[id(m)] = make(m)
            return h, [m]
        return build

    def cache(kind):
        def build():
            h = AssayCallbackHandler()
            h._json_cache = kind()
            return h, [HumanMessage("hi")]
        return build

    def declared_none():
        langchain._DECLARES[(HumanMessage, "tool_calls")] = None  # read as "not asked yet"
        m = HumanMessage("hi", tool_calls=[{"name": "n", "id": "i", "args": {}}])
        return AssayCallbackHandler(), [m]

    def declares_edited():
        class Shifty(HumanMessage):
            pass

        class Editor(HumanMessage):
            @property
            def content(self):  # noqa: F811 - shadows the field on purpose
                Shifty.tool_calls = [{"name": "attr", "id": "a", "args": {}}]
                langchain._DECLARES.pop((Shifty, "tool_calls"), None)
                return self.__dict__["content"]

        first = Shifty("one", tool_calls=[{"name": "extra", "id": "e", "args": {}}])
        return AssayCallbackHandler(), [first, Editor("edit"), Shifty("two")]

    builds = {"list": entry(lambda m: [m, m.content, None, '"CACHED"']),
              "5-tuple": entry(lambda m: (m, m.content, None, '"CACHED"', 0)),
              "3-tuple": entry(lambda m: (m, m.content, None)),
              "tuple subclass": entry(lambda m: Tuple((m, m.content, None, '"CACHED"'))),
              "None": entry(lambda m: None),
              "dict subclass": cache(Cache), "UserDict": cache(collections.UserDict),
              "declared None": declared_none, "declares edited": declares_edited}
    for name, build in builds.items():
        assert run(history_json, build) == run(None, build), name
    assert run(history_json, builds["5-tuple"])[0] == '["CACHED"]'
    assert run(history_json, builds["3-tuple"])[0] == ("IndexError", "tuple index out of range")


def test_compiled_clean_lets_python_read_keys_that_are_not_plain_str():
    """A key of a str subclass may run code of its own while it is hashed; clean() then
    reads the dict in Python, which notices the dict changing as it is read."""
    from otel_assay.capture import _spans

    if _spans._clean_plain is None:
        pytest.skip("the _capturec extension is not built")

    armed = []

    class Key(str):
        def __hash__(self):
            if armed:
                attrs.pop("b", None)
            return str.__hash__(self)

    attrs = {Key("k"): "v", "b": "y", "c": "z"}
    armed.append(True)
    assert _spans._clean_plain(attrs) is None
    with pytest.raises(RuntimeError, match="changed size during iteration"):
        _spans.clean(attrs)
