"""_spans.clean, which every adapter's span attributes go through: it turns what the SDK
would refuse (None, dicts, mixed lists, objects) into values the SDK keeps as they are."""

import math

from opentelemetry.sdk.trace import TracerProvider

from otel_assay.capture import _spans


class _Str(str):
    pass


class _Int(int):
    pass


VALUES = [None, "", "text ✓", _Str("sub"), 0, -5, 10**40, True, False, _Int(3), 1.5, -0.0, float("nan"),
          float("inf"), float("-inf"), [], (), ["a", "b"], ("a", "b"), ["a", 1], ("a", None), [_Str("x")],
          {"k": [1, 2]}, b"\xff", {"s"}, object.__new__(object), [[]]]


def test_the_sdk_keeps_every_cleaned_value():
    """A span started with clean(attrs) has every attribute clean kept, none dropped."""
    attrs = {f"k{i}": v for i, v in enumerate(VALUES)}
    cleaned = _spans.clean(attrs)
    assert len(cleaned) == len(VALUES) - 1  # None is left out
    span = TracerProvider().get_tracer("t").start_span("s", attributes=cleaned)
    assert list(span.attributes) == list(cleaned)
    for k, v in cleaned.items():
        stored = span.attributes[k]
        assert (list(stored) if isinstance(stored, tuple) else stored) == v, k


def test_clean_gives_each_kind_of_value_its_form():
    out = _spans.clean({"s": "a", "i": 1, "b": True, "f": 2.5, "nan": float("nan"), "inf": float("-inf"),
                        "l": ("x", "y"), "n": None, "mixed": ["a", 1], "d": {"z": 1, "a": [1, 2]},
                        "bytes": b"\xff", "set": {"s"}, "empty": []})
    assert out == {"s": "a", "i": 1, "b": True, "f": 2.5, "nan": "nan", "inf": "-inf", "l": ["x", "y"],
                   "mixed": '["a", 1]', "d": '{"a": [1, 2], "z": 1}', "bytes": '"\ufffd"', "set": '["s"]',
                   "empty": []}
    assert math.isfinite(out["f"])


def test_clean_copies_lists_and_keeps_the_input():
    attrs = {"l": ["a"], "t": ("b",)}
    out = _spans.clean(attrs)
    assert out == {"l": ["a"], "t": ["b"]} and out["l"] is not attrs["l"]
    assert attrs == {"l": ["a"], "t": ("b",)}
