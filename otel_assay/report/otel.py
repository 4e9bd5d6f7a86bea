"""Verdicts back into OpenTelemetry: an ``assay.gate`` span carrying one
``gen_ai.evaluation.result`` event per check (GenAI semantic conventions), so a dashboard
that shows the agent's traces shows the gate's verdicts next to them.

In a lake, the span's trace is not a trial: the trials view leaves out traces made only of
spans of this scope (``otel_assay.gate``).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from .. import semconv
from ..errors import UsageError

EXPLANATION = "gen_ai.evaluation.explanation"
GATE_SCOPE = "otel_assay.gate"  # the trials view leaves out traces of this scope only
_SCORE = {"PASS": 1.0, "FAIL": 0.0, "INCONCLUSIVE": 0.5}


def _events(result):
    for r in result.scenarios:
        for c in r.checks:
            if c.verdict == "SKIPPED":
                continue
            attrs = {semconv.GEN_AI_EVALUATION_NAME: f"otel-assay.{c.name}",
                     semconv.GEN_AI_EVALUATION_SCORE_LABEL: c.verdict.lower(),
                     semconv.GEN_AI_EVALUATION_SCORE_VALUE: _SCORE[c.verdict],
                     EXPLANATION: c.reason, "assay.scenario.evaluated": r.scenario, "assay.gate.gating": c.gating}
            for k in ("pvalue_adjusted", "drop", "t2", "d_eff"):
                v = c.stats.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    attrs[f"assay.gate.{k}"] = v
            yield attrs
    yield {semconv.GEN_AI_EVALUATION_NAME: "otel-assay.decision",
           semconv.GEN_AI_EVALUATION_SCORE_LABEL: result.decision,
           semconv.GEN_AI_EVALUATION_SCORE_VALUE: {"deploy": 1.0, "block": 0.0, "manual": 0.5}[result.decision],
           EXPLANATION: "; ".join(result.reasons)[:4000]}


def check_target(target: str | None, lake) -> None:
    """Refuse an emit target that cannot work before the analysis runs: after it, the
    failure would only be a warning."""
    if target and target != "lake" and not (target.startswith(("http://", "https://")) and _has_host(target)):
        raise UsageError(f"--emit-otel {target!r}: use `lake` or an OTLP/HTTP URL such as "
                         "http://127.0.0.1:4318/v1/traces")
    if target == "lake" and not Path(lake).is_dir():
        # a glob or a single file is no place to write spans into
        raise UsageError(f"--emit-otel lake writes into the lake directory, and {lake} is not one; "
                         "give LAKE as a directory or emit to an OTLP/HTTP URL")


def _has_host(url: str) -> bool:
    """Whether ``url`` names a host (``http://`` or a typo in the port does not)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return False
    return bool(parts.hostname)


class EmitError(RuntimeError):
    """The target did not take the verdicts (unreachable collector, unwritable lake)."""


def emit_results(result, target: str, lake: str | os.PathLike | None = None) -> int:
    """Emit the verdicts; ``target`` is ``"lake"`` (write into ``lake``) or an OTLP/HTTP
    traces URL. Returns the number of events; raises :class:`EmitError` when the target
    did not accept them. Uses its own tracer provider, so the application's global one is
    left alone."""
    # imported here: the command line loads this module at start-up (`--help` must not pay
    # for the OTel SDK, the exporters or pyarrow), and few gate runs emit their verdicts
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ..lake.schema import Limits

    # the span is built first and exported by hand: a span processor would swallow the result.
    # The SDK keeps 128 events per span by default and drops the oldest silently (with ~40
    # scenarios, the first scenarios' verdicts); a lake keeps up to max_events. So a span
    # holds at most that many, and the verdicts beyond go to child spans named alike.
    per_span = Limits().max_events
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-assay-gate"}),
                              span_limits=SpanLimits(max_events=per_span))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer(GATE_SCOPE)
    attrs = {"assay.gate.decision": result.decision, "assay.gate.exit_code": result.exit_code,
             "assay.gate.candidate": result.candidate["selection"]}
    if result.baseline:
        attrs["assay.gate.baseline"] = result.baseline["selection"]
    *checks, decision = _events(result)
    n = len(checks) + 1
    with tracer.start_as_current_span("assay.gate", attributes=attrs) as span:
        for ev in checks[:per_span - 1] + [decision]:  # the decision stays on the assay.gate span
            span.add_event(semconv.GEN_AI_EVALUATION_RESULT, ev)
        for start in range(per_span - 1, len(checks), per_span):
            with tracer.start_as_current_span("assay.gate", attributes=attrs) as part:
                for ev in checks[start:start + per_span]:
                    part.add_event(semconv.GEN_AI_EVALUATION_RESULT, ev)
    provider.shutdown()
    exporter = None
    try:
        if target == "lake":
            from ..collect.exporter import ParquetSpanExporter
            exporter = ParquetSpanExporter(str(lake))  # raises LakeError for a lake it cannot write
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            exporter = OTLPSpanExporter(endpoint=target)
        ok = exporter.export(memory.get_finished_spans()) == SpanExportResult.SUCCESS
        ok = exporter.force_flush() and ok if target == "lake" else ok  # the lake writes on flush
    except Exception as e:  # an exporter should not raise, but a failure must not look like success
        raise EmitError(f"{type(e).__name__}: {e}") from None
    finally:
        if exporter is not None:
            exporter.shutdown()
    if not ok:
        raise EmitError("the target did not accept them")
    return n
