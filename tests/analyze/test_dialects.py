"""Hand-built spans in the shapes other instrumentations write, where a recording with the
real library is not possible or a table of cases says more: which operation names are
model calls, what an unknown one does to a trial."""

from __future__ import annotations

import pytest

from .conftest import rows
from .lakes import span, tid, write_lake

MODEL = {"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
         "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 3}
GPT_4O_MINI_COST = (12 * 0.15 + 3 * 0.60) / 1e6

# gen_ai.operation.name values of a model call that produces a turn: the GenAI conventions'
# and LiteLLM's call types (acompletion is every async LiteLLM call)
GENERATION = ["chat", "text_completion", "generate_content", "completion", "acompletion", "atext_completion",
              "agenerate_content", "responses", "aresponses", "anthropic_messages", "aanthropic_messages"]
# model calls that produce no turn: `other` steps, their tokens are not the trial's
NO_TURN = ["embeddings", "embedding", "aembedding", "rerank", "arerank", "moderation", "amoderation",
           "image_generation", "aimage_generation", "transcription", "atranscription", "speech", "aspeech"]


def _trial(eng, n=1):
    return rows(eng, "SELECT * FROM trials WHERE trace_id = ?", [tid(n)])[0]


@pytest.mark.parametrize("op", GENERATION)
def test_every_generation_operation_name_is_an_llm_call(op, tmp_path, open_engine):
    write_lake(tmp_path, [span(1, 1, None, f"{op} gpt-4o-mini", 0, 10, {**MODEL, "gen_ai.operation.name": op},
                               scope="litellm")])
    t = _trial(open_engine(tmp_path))
    assert (t["n_steps"], t["n_llm"], t["input_tokens"], t["output_tokens"], t["error_class"], t["n_unknown_ops"]) == (
        1, 1, 12, 3, None, 0)
    assert t["cost_usd"] == pytest.approx(GPT_4O_MINI_COST, rel=1e-12)


@pytest.mark.parametrize("op", NO_TURN)
def test_a_model_call_without_a_turn_is_an_other_step(op, tmp_path, open_engine):
    write_lake(tmp_path, [span(1, 1, None, f"{op} gpt-4o-mini", 0, 10, {**MODEL, "gen_ai.operation.name": op},
                               scope="litellm")])
    eng = open_engine(tmp_path)
    assert [s["step_kind"] for s in rows(eng, "SELECT step_kind FROM steps")] == ["other"]
    t = _trial(eng)
    assert (t["n_steps"], t["n_llm"], t["input_tokens"], t["cost_usd"], t["n_unknown_ops"]) == (1, 0, 0, 0.0, 0)


@pytest.mark.parametrize("request_type", ["chat", "completion", "acompletion", "atext_completion"])
def test_llm_request_type_alone_names_a_model_call(request_type, tmp_path, open_engine):
    # OpenLLMetry's key, without an operation name (older Traceloop SDKs)
    write_lake(tmp_path, [span(1, 1, None, "openai.chat", 0, 10, {**MODEL, "llm.request.type": request_type},
                               scope="opentelemetry.instrumentation.openai")])
    t = _trial(open_engine(tmp_path))
    assert (t["n_llm"], t["input_tokens"], t["output_tokens"], t["error_class"]) == (1, 12, 3, None)


def test_an_unknown_operation_name_is_counted_not_silently_dropped(tmp_path, open_engine):
    # a model call under a name no mapping knows: no step (otel-assay cannot tell what it
    # is), so the trial is an empty run, and the trial says why it may be
    write_lake(tmp_path, [
        span(1, 1, None, "summon gpt-4o-mini", 0, 10, {**MODEL, "gen_ai.operation.name": "summon"}, scope="x"),
        span(1, 2, 1, "summon gpt-4o-mini", 1, 9, {**MODEL, "gen_ai.operation.name": "summon"}, scope="x"),
        span(2, 1, None, "chat gpt-4o-mini", 0, 10, {**MODEL, "gen_ai.operation.name": "chat"}, scope="x"),
    ])
    eng = open_engine(tmp_path)
    unknown, known = _trial(eng, 1), _trial(eng, 2)
    assert (unknown["n_steps"], unknown["error_class"], unknown["n_unknown_ops"]) == (0, "empty-run", 2)
    assert (known["n_llm"], known["error_class"], known["n_unknown_ops"]) == (1, None, 0)
