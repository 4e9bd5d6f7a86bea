"""_spans.clean, which every adapter's span attributes go through: in C (_capturec.clean_plain)
for the plain values nearly every span has, in Python for the rest, with the same result."""

import math
import types

import pytest

from otel_assay.capture import _spans


class _Str(str):
    pass


class _Int(int):
    pass


class _List(list):
    def __iter__(self):
        return iter(["not", "what", "it", "holds"])


VALUES = [None, "", "text ✓", _Str("sub"), 0, -5, 10**40, True, False, _Int(3), 1.5, -0.0, float("nan"),
          float("inf"), float("-inf"), [], (), ["a", "b"], ("a", "b"), ["a", 1], ("a", None), [_Str("x")],
          _List(["x"]), {"k": [1, 2]}, b"\xff", {"s"}, object.__new__(object), [[]]]


def _python_clean(attrs):
    """clean() with the compiled part switched off."""
    saved, _spans._clean_plain = _spans._clean_plain, None
    try:
        return _spans.clean(attrs)
    finally:
        _spans._clean_plain = saved


def _same(a, b):
    assert list(a) == list(b)  # same keys, same order
    for k in a:
        x, y = a[k], b[k]
        assert type(x) is type(y), k
        assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), k


def test_compiled_clean_gives_what_the_python_clean_gives():
    if _spans._clean_plain is None:
        pytest.skip("the _capturec extension is not built")
    for i, v in enumerate(VALUES):
        attrs = {"before": "x", f"k{i}": v, "after": 1}
        _same(_spans.clean(attrs), _python_clean(attrs))
    every = {f"k{i}": v for i, v in enumerate(VALUES)}
    _same(_spans.clean(every), _python_clean(every))
    plain = {"s": "a", "i": 1, "b": True, "f": float("nan"), "l": ("x", "y"), "n": None}
    assert _spans._clean_plain(plain) == {"s": "a", "i": 1, "b": True, "f": "nan", "l": ["x", "y"]}
    # what C leaves to Python: a value of another type, a subclass, a mapping that is no dict
    for attrs in ({"v": _Str("s")}, {"v": [_Str("s")]}, {"v": _List(["x"])}, {"v": {"k": 1}},
                  types.MappingProxyType({"v": "s"})):
        assert _spans._clean_plain(attrs) is None
    assert _spans.clean(types.MappingProxyType({"v": "s", "n": None})) == {"v": "s"}
    _same(_spans.clean({"v": _List(["x"])}), _python_clean({"v": _List(["x"])}))


def test_clean_copies_lists_and_keeps_the_input():
    attrs = {"l": ["a"], "t": ("b",)}
    out = _spans.clean(attrs)
    assert out == {"l": ["a"], "t": ["b"]} and out["l"] is not attrs["l"]
    assert attrs == {"l": ["a"], "t": ("b",)}


def test_capture_content_follows_every_change_of_the_environment(monkeypatch):
    """capture_content() remembers what the variable's current value means; every change
    made through os.environ (set, set again, the same text anew, delete) is seen at once.
    (monkeypatch.setenv / delenv change os.environ, and undo every change afterwards.)"""
    from otel_assay.capture import _runtime

    var = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    monkeypatch.delenv(var, raising=False)
    assert _runtime.capture_content() and _runtime.capture_content()
    for value, on in (("NO_CONTENT", False), ("no_content", False), ("true", True), (" off ", False),
                      ("off", False), ("", True), ("0", False), ("1", True)):
        monkeypatch.setenv(var, value)
        assert _runtime.capture_content() is on, value
        assert _runtime.capture_content() is on, value  # remembered
    monkeypatch.delenv(var)
    assert _runtime.capture_content() is True
    monkeypatch.setenv(var, "false")
    assert _runtime.capture_content() is False
