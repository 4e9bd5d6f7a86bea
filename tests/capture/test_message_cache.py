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


def test_output_message_from_the_cache_matches_full_serialisation():
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
