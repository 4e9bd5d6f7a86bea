"""The exporter's compiled attribute loop (``_otlpc.sdk_attributes``) against the Python loop
it stands in for (``SpanBatch._attrs_into``), and through the real exporter.

The two must leave exactly the same map entries, promoted values (the same objects, str
subclasses and int enums included), dropped and truncated counts, and raise the same errors.
Attributes are generated with a fixed seed over every branch: promoted keys of each type
given values of the wrong type, values and keys at and past tight limits, non-str values
(floats that are not finite, ints past int64, bools, sequences, objects), a value whose
text is computed by Python code that changes the dict.
"""

from __future__ import annotations

import enum
import os
import random

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_assay import semconv
from otel_assay.analyze.engine import Engine
from otel_assay.collect import schema
from otel_assay.collect.exporter import ParquetSpanExporter
from otel_assay.collect.schema import TRUNCATION_MARK, Limits, SpanBatch, stringify

pytestmark = pytest.mark.skipif(
    os.environ.get("OTEL_ASSAY_PURE_PYTHON") == "1", reason="the compiled loop is turned off")

sdk_attributes = schema._c_sdk_attributes

STRING_KEYS = [key for _col, key, t in semconv.PROMOTED_SPAN_ATTRIBUTES if t == "string"]
INT_KEYS = [key for _col, key, t in semconv.PROMOTED_SPAN_ATTRIBUTES if t == "int64"]
DOUBLE_KEYS = [key for _col, key, t in semconv.PROMOTED_SPAN_ATTRIBUTES if t == "double"]


class Text(str):
    """A str subclass: the Python loop's `type(value) is str` fast branch skips it."""


class Level(enum.IntEnum):
    HIGH = 7


class Shown:
    def __str__(self) -> str:
        return "shown-" + "x" * 12


def test_the_compiled_loop_is_built():
    assert sdk_attributes is not None, "otel_assay/collect/_otlpc.c was not compiled: reinstall the package"
    assert INT_KEYS and DOUBLE_KEYS and STRING_KEYS


def random_value(rng: random.Random):
    pick = rng.randrange(16)
    if pick < 5:
        return rng.choice(["", "a", "short", "exactly-10", "longer than ten", "ünïcödé ✓ text", "x" * 40])
    return [
        lambda: Text(rng.choice(["t", "text subclass value"])),
        lambda: rng.choice([0, 1, -5, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 10**30]),
        lambda: rng.choice([True, False]),
        lambda: Level.HIGH,
        lambda: rng.choice([0.5, -0.0, float("inf"), float("nan"), 1e300]),
        lambda: tuple(rng.choice(["stop", "tool_calls", "ü"]) for _ in range(rng.randrange(4))),
        lambda: [rng.randrange(100), "x", 1.5, True],
        lambda: b"\x00\xffbytes",
        lambda: Shown(),
        lambda: {"nested": [1, 2]},
        lambda: None,
    ][pick - 5]()


def random_attributes(rng: random.Random) -> dict:
    pool = STRING_KEYS + INT_KEYS + DOUBLE_KEYS + ["k", "key.two", "a.much.longer.attribute.key", "ünï", "z" * 9]
    return {rng.choice(pool) + rng.choice(["", "", "", ".x"]): random_value(rng) for _ in range(rng.randrange(12))}


def run_python(attrs: dict, limits: Limits):
    batch = SpanBatch(limits)
    promoted: dict = {}
    try:
        dropped = batch._attrs_into(batch._span_attrs, attrs.items(), promoted, True)
    except Exception as e:
        return ("error", type(e), str(e))
    m = batch._span_attrs
    return dropped, batch.truncated_values, m.keys, m.values, promoted, m.offsets


def run_compiled(attrs: dict, limits: Limits):
    batch = SpanBatch(limits)
    promoted: dict = {}
    try:
        dropped = batch._sdk_attrs_into(Immutable(attrs), promoted)
    except Exception as e:
        return ("error", type(e), str(e))
    m = batch._span_attrs
    return dropped, batch.truncated_values, m.keys, m.values, promoted, m.offsets


class Immutable:
    """What the SDK's BoundedAttributes of an ended span offers: its dict and the flag."""

    def __init__(self, d: dict):
        self._dict = d
        self._immutable = True

    def __bool__(self) -> bool:
        return bool(self._dict)

    def items(self):
        raise AssertionError("the compiled loop was not taken")


def same(a, b) -> bool:
    """Equal, with NaN equal to itself and the same types (a Text is not a str, 1 not True)."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("limits", [Limits(), Limits(max_attributes=3, max_value_chars=10, max_key_chars=8),
                                    Limits(max_attributes=0, max_value_chars=0, max_key_chars=0)])
def test_the_compiled_loop_matches_the_python_loop(limits):
    rng = random.Random(20261124)
    cut = dropped = promoted = 0
    for _ in range(3000):
        attrs = random_attributes(rng)
        py, c = run_python(attrs, limits), run_compiled(attrs, limits)
        assert same(py, c), (attrs, py, c)
        if py[0] != "error":
            cut += py[1]
            dropped += py[0]
            promoted += len(py[4])
    # the generated attributes reach the branches they are meant to
    if limits.max_value_chars == 10:
        assert cut > 500 and dropped > 500 and promoted > 500
    elif limits.max_value_chars == 0:
        assert dropped > 1000 and promoted > 1000
    else:
        assert cut == dropped == 0 and promoted > 1000


def test_a_long_value_is_cut_and_marked_in_both_homes():
    limits = Limits(max_value_chars=4)
    attrs = {STRING_KEYS[0]: "abcdefgh", "plain": "ijklmnop", INT_KEYS[0]: Text("qrstuvw"), "seq": ("ab", "cd")}
    dropped, truncated, keys, values, promoted, _ = run_compiled(attrs, limits)
    assert truncated == 4 and dropped == 0
    assert promoted[semconv.PROMOTED_SPAN_ATTRIBUTES[0][0]] == "abcd" + TRUNCATION_MARK
    assert dict(zip(keys, values)) == {"plain": "ijkl" + TRUNCATION_MARK, INT_KEYS[0]: "qrst" + TRUNCATION_MARK,
                                       "seq": '["ab' + TRUNCATION_MARK}


def test_python_code_that_changes_the_attributes_fails_both_alike():
    def attributes() -> dict:
        attrs: dict = {}

        class Grows:
            def __repr__(self) -> str:
                attrs["added"] = "late"
                return "grows"

        attrs.update({"first": 1.5, "grows": [Grows()], "last": "z"})
        return attrs

    py, c = run_python(attributes(), Limits()), run_compiled(attributes(), Limits())
    assert py == c == ("error", RuntimeError, "dictionary changed size during iteration")


def test_what_the_compiled_loop_declines_the_python_loop_takes():
    # a key that is not a str (code other than the SDK's), or promoted columns already set
    assert sdk_attributes({1: "x"}, [], [], {}, {}, {}, 8, 8, 8, "!", stringify) is None
    assert sdk_attributes({"k": "x"}, [], [], {"op": "chat"}, {}, {}, 8, 8, 8, "!", stringify) is None
    # the Python loop decides: an int key has no length, and the exporter rejects the span
    with pytest.raises(TypeError, match="has no len"):
        SpanBatch()._sdk_attrs_into(Immutable({"k": "v", 1: "x"}), {})
    with pytest.raises(TypeError):
        sdk_attributes({"k": "x"}, [], [], {}, {}, {})


def test_exported_spans_take_the_compiled_loop_and_land_in_the_lake(tmp_path, monkeypatch):
    calls = []
    real = schema._c_sdk_attributes
    monkeypatch.setattr(schema, "_c_sdk_attributes", lambda *a: calls.append(1) or real(*a))
    exporter = ParquetSpanExporter(tmp_path / "lake")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m" * 300_000,
            "gen_ai.usage.input_tokens": 12, "gen_ai.response.finish_reasons": ("stop",),
            "gen_ai.usage.output_tokens": "not an int", "custom.flag": True}):
        pass
    provider.shutdown()
    assert calls == [1]
    with Engine(tmp_path / "lake") as eng:
        row = eng.query("SELECT op, model, input_tokens, output_tokens, attributes, dropped_attributes_count "
                        "FROM spans").to_pylist()[0]
    assert row["op"] == "chat" and row["input_tokens"] == 12 and row["output_tokens"] is None
    assert row["model"] == "m" * Limits().max_value_chars + TRUNCATION_MARK
    assert dict(row["attributes"]) == {"gen_ai.response.finish_reasons": '["stop"]',
                                       "gen_ai.usage.output_tokens": "not an int", "custom.flag": "true"}
    assert exporter.spans_written == 1
