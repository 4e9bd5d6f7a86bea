"""The per-step cost cut in the LangChain adapter: chat input messages are serialised once
per message object (cached) and joined, and the result is identical to serialising the
whole history."""

import pytest


def test_message_json_cache_matches_full_serialisation():
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


def test_cached_history_matches_the_general_serialisation():
    """Every message shape, and values only the encoder's fallback can write, serialise
    through the cache as they do whole, the first time and from the cache."""
    pytest.importorskip("langchain_core")
    from langchain_core.messages import ToolMessage

    from otel_assay.capture._spans import to_json
    from otel_assay.capture.langchain import AssayCallbackHandler, _message_json

    msgs = _messages()
    odd_id = ToolMessage("r", tool_call_id="c")
    object.__setattr__(odd_id, "tool_call_id", 7)  # past pydantic's validation, as a hand-made message can be
    msgs.append(odd_id)
    # (the circular one aside: the whole list of it falls back to one string, each message alone
    # to a string per message)
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
