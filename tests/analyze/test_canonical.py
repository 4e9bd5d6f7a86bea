"""Canonical JSON for tool arguments: every observed shape of one call gives one text."""

from __future__ import annotations

import json

import pytest

from otel_assay.analyze.canonical import canonical_json

SAME = '{"a":2,"b":3}'


@pytest.mark.parametrize("raw", [
    '{"a": 2, "b": 3}',                                   # JSON string (semconv, OpenInference)
    '{"b":3,"a":2}',                                      # other key order
    "{'a': 2, 'b': 3}",                                   # Python repr (CrewAI, LangChain input_str)
    '{"inputs": {"a": 2, "b": 3}, "tags": [], "metadata": {}}',   # Traceloop wrapper
    '{"input_str": "{\'a\': 2, \'b\': 3}", "tags": null}',        # Traceloop wrapper around a repr
    '"{\\"a\\": 2, \\"b\\": 3}"',                         # JSON-encoded JSON string
])
def test_shapes_of_one_call_agree(raw):
    assert canonical_json(raw) == SAME


def test_values_that_are_not_wrappers_stay():
    assert canonical_json('{"input": "x"}') == '{"input":"x"}'      # a tool whose parameter is named input
    assert canonical_json('{"inputs": {"a": 1}, "other": 2}') == '{"inputs":{"a":1},"other":2}'
    assert canonical_json("plain text") == '"plain text"'
    assert canonical_json("{not json") == '"{not json"'
    assert canonical_json("{'s': {1, 2}, 't': (1, 2), 'n': None, 'b': True}") == '{"b":true,"n":null,"s":[1,2],"t":[1,2]}'
    assert canonical_json(None) is None
    assert canonical_json('{"x": NaN}') == '{"x":null}'
    assert canonical_json('{"k": "é"}') == '{"k":"é"}'


def test_integral_floats_are_the_integers_they_equal():
    """One emitter writes 1, another 1.0 (a Python float argument, a JSON encoder's choice):
    one value, so one canonical text (redundancy and boundary coverage compare strings)."""
    assert canonical_json('{"n": 1.0, "m": [2.0, -0.0]}') == canonical_json("{'n': 1, 'm': [2, 0]}") == '{"m":[2,0],"n":1}'
    assert canonical_json('{"x": 1.5}') == '{"x":1.5}'
    assert canonical_json('{"big": 1e300}') == '{"big":1e+300}'  # beyond exact integers it stays a float


def test_arguments_nested_past_the_parsers_depth_stay_text():
    # a hostile tool argument must not stop the analysis of every trial (RecursionError)
    for raw in ("[" * 100_000 + "]" * 100_000, '{"a": ' * 5_000 + "1" + "}" * 5_000):
        assert canonical_json(raw) == json.dumps(raw, ensure_ascii=False)
