"""`import otel_assay.auto` before or after the framework; implicit trials; content capture off.
Each case is a fresh interpreter (import order and the global provider are per process)."""

import pytest

from ._helpers import need  # noqa: E402

need("langgraph")

from ._helpers import root, run_script, spans, trial_spans  # noqa: E402

EXPECTED = ["assay.trial order", "invoke_agent billing", "chat scripted-1", "execute_tool secret_lookup",
            "chat scripted-1"]


@pytest.mark.parametrize("order", ["auto-first", "auto-last"])
def test_import_order(tmp_path, order):
    lake = tmp_path / "lake"
    run_script("langgraph_small.py", lake, order)
    (tr,) = trial_spans(lake, "order")
    assert [s["name"] for s in tr] == EXPECTED
    assert root(tr)["version"] == order and root(tr)["outcome"] == "pass"
    tool = tr[3]
    assert tool["tool_call_id"] == "x1" and tool["attributes"]["gen_ai.tool.call.result"] == "ann owes 12 EUR"


def test_implicit_trials_from_env(tmp_path):
    lake = tmp_path / "lake"
    run_script("langgraph_small.py", lake, "implicit",
               env={"OTEL_ASSAY_SCENARIO": "billing-q", "OTEL_ASSAY_VERSION": "v7", "OTEL_ASSAY_RUN_ID": "ci-42"})
    traces = trial_spans(lake, "billing-q")
    assert len(traces) == 2
    for i, tr in enumerate(traces):
        r = root(tr)
        assert (r["trial_index"], r["version"], r["run_id"], r["outcome"]) == (i, "v7", "ci-42", "pass")
        assert r["attributes"]["assay.trial.implicit"] == "true"
        assert [s["name"] for s in tr] == ["assay.trial billing-q"] + EXPECTED[1:]
        assert all((s["scenario"], s["version"]) == ("billing-q", "v7") for s in tr)
    assert spans(lake, "scenario IS NULL") == []


def test_message_content_can_be_turned_off(tmp_path):
    lake = tmp_path / "lake"
    run_script("langgraph_small.py", lake, "auto-first",
               env={"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "NO_CONTENT"})
    (tr,) = trial_spans(lake, "order")
    assert [s["name"] for s in tr] == EXPECTED
    for s in tr:
        for key in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.input.messages",
                    "gen_ai.output.messages"):
            assert key not in s["attributes"], (s["name"], key)
        for v in s["attributes"].values():
            assert "ann" not in v
    # structure, ids and usage are still there
    assert tr[3]["tool_call_id"] == "x1" and tr[2]["input_tokens"] == 3


def test_unsampled_trial_is_reported_and_the_handler_stays_quiet(tmp_path):
    # an application sampler that drops the trial: its spans are non-recording, which the
    # callback handler must take in its stride (LangChain logs each handler exception)
    lake = tmp_path / "lake"
    p = run_script("langgraph_small.py", lake, "auto-first", env={"OTEL_TRACES_SAMPLER": "always_off"})
    assert "Error in AssayCallbackHandler" not in p.stderr, p.stderr
    assert p.stderr.count("is not recorded") == 1, p.stderr
    assert not lake.exists() or spans(lake) == []
