"""The trial's assay.* attributes reach every span of the trial through the span processor,
as ``Span.set_attributes`` sets them (under the provider's limits, after the span's own)."""

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider

from otel_assay import semconv
from otel_assay.capture import _runtime


class _Text(str):
    pass


TRIAL = {semconv.ASSAY_SCENARIO: "refund", semconv.ASSAY_RUN_ID: "r" * 32, semconv.ASSAY_AGENT_VERSION: "v2",
         semconv.ASSAY_TRIAL_INDEX: 3}


def _through_processor(limits: SpanLimits, own: dict, trial: dict):
    """A span started with ``own`` attributes inside a registered trial, through our processor."""
    provider = TracerProvider(span_limits=limits)
    provider.add_span_processor(_runtime.AssayAttributesProcessor())
    root = provider.get_tracer("t").start_span("root")
    trace_id = root.get_span_context().trace_id
    _runtime.register_trace(trace_id, trial)
    try:
        return provider.get_tracer("t").start_span("s", context=trace.set_span_in_context(root), attributes=own)
    finally:
        _runtime.unregister_trace(trace_id)


CASES = {
    "common": (SpanLimits(), {"gen_ai.operation.name": "chat", "n": 1}, TRIAL),
    "no own attributes": (SpanLimits(), {}, TRIAL),
    "exactly full": (SpanLimits(max_span_attributes=6), {"a": "1", "b": 2}, TRIAL),
    "one too many": (SpanLimits(max_span_attributes=5), {"a": "1", "b": 2}, TRIAL),
    "no attributes allowed": (SpanLimits(max_span_attributes=0), {}, TRIAL),
    "key already set": (SpanLimits(), {semconv.ASSAY_AGENT_VERSION: "own", "z": 1}, TRIAL),
    "text at the length limit": (SpanLimits(max_attribute_length=32), {"a": "x" * 40}, TRIAL),
    "text past the length limit": (SpanLimits(max_attribute_length=31), {"a": "x"}, TRIAL),
    "a value the SDK cleans": (SpanLimits(), {"a": "x"}, {**TRIAL, "assay.extra": ["a", "b"]}),
    "an object value": (SpanLimits(), {"a": "x"}, {**TRIAL, "assay.extra": object()}),
    "a bool": (SpanLimits(), {}, {**TRIAL, "b": True}),
    # SDK versions differ on these (1.30 decodes bytes, drops None, makes a str subclass a str)
    "a float": (SpanLimits(), {}, {**TRIAL, "f": 1.5}),
    "bytes": (SpanLimits(), {}, {**TRIAL, "y": b"\x00"}),
    "None": (SpanLimits(), {}, {**TRIAL, "none": None}),
    "a str subclass": (SpanLimits(max_attribute_length=64), {}, {**TRIAL, semconv.ASSAY_SCENARIO: _Text("refund")}),
    "an empty key": (SpanLimits(), {}, {**TRIAL, "": "x"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_trial_attributes_are_what_set_attributes_gives(case):
    limits, own, trial = CASES[case]
    twin = TracerProvider(span_limits=limits).get_tracer("t").start_span("s", attributes=own)
    twin.set_attributes(trial)
    ours = _through_processor(limits, own, trial)
    assert list(ours.attributes.items()) == list(twin.attributes.items())
    assert ours.dropped_attributes == twin.dropped_attributes


def test_spans_of_a_trial_carry_its_attributes_from_baggage_too():
    """A span whose trace is not a registered trial's (another process's, whose context
    carried the trial's baggage) gets the attributes from the baggage."""
    from opentelemetry import baggage, context

    provider = TracerProvider()
    provider.add_span_processor(_runtime.AssayAttributesProcessor())
    ctx = context.Context()
    for k, v in ((semconv.ASSAY_SCENARIO, "refund"), (semconv.ASSAY_RUN_ID, "r1"), (semconv.ASSAY_TRIAL_INDEX, "4")):
        ctx = baggage.set_baggage(k, v, ctx)
    span = provider.get_tracer("t").start_span("s", context=ctx, attributes={"a": 1})
    assert dict(span.attributes) == {"a": 1, semconv.ASSAY_SCENARIO: "refund", semconv.ASSAY_RUN_ID: "r1",
                                     semconv.ASSAY_TRIAL_INDEX: 4}
    # a trial index from another process's baggage that is no number stays text; "²" passes
    # str.isdigit() but not int(), and made every span of that context fail to start
    for index, stored in (("²", "²"), ("x1", "x1"), ("١٢", 12)):
        ctx2 = baggage.set_baggage(semconv.ASSAY_TRIAL_INDEX, index, ctx)
        span = provider.get_tracer("t").start_span("s", context=ctx2)
        assert span.attributes[semconv.ASSAY_TRIAL_INDEX] == stored


def test_content_capture_follows_the_environment_at_every_call(monkeypatch):
    """Setting, changing or removing the variable at any time, through os.environ or a
    replaced mapping, takes effect at the next model or tool call."""
    import os

    name = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    monkeypatch.delenv(name, raising=False)
    assert _runtime.capture_content() is True
    for value, on in ((" NO_content ", False), ("true", True), ("0", False), ("off", False), ("", True),
                      ("False", False), ("yes", True)):
        os.environ[name] = value
        assert _runtime.capture_content() is on, value
    del os.environ[name]
    assert _runtime.capture_content() is True
    monkeypatch.setattr(os, "environ", {name: "no_content"})
    assert _runtime.capture_content() is False
    os.environ[name] = "1"
    assert _runtime.capture_content() is True
