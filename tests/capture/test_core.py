"""Trial API, generic steps, provider policy, export paths. No agent framework needed."""

import json
import subprocess
import sys
from collections import Counter

import pytest

from ._helpers import REPO, jload, otlp_sink, query, root, run_script, spans, steps, trial_spans


def test_import_is_cheap_and_imports_no_framework():
    code = ("import sys, otel_assay\n"
            "assert otel_assay.__version__\n"
            "heavy = [m for m in sys.modules if m.split('.')[0] in "
            "('opentelemetry', 'pyarrow', 'duckdb', 'langchain_core', 'langgraph', 'crewai', 'autogen_core', "
            "'agents', 'smolagents', 'wrapt')]\n"
            "assert not heavy, heavy\n"
            "import otel_assay.auto\n"
            "fw = [m for m in sys.modules if m.split('.')[0] in "
            "('langchain_core', 'langgraph', 'crewai', 'autogen_core', 'autogen_agentchat', 'agents', 'smolagents', 'openai')]\n"
            "assert not fw, fw\n"
            "assert callable(otel_assay.trial) and callable(otel_assay.flush) and callable(otel_assay.step)\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)


@pytest.fixture(scope="module")
def generic(tmp_path_factory):
    lake = tmp_path_factory.mktemp("generic") / "lake"
    p = run_script("core_run.py", lake, "generic", env={"OTEL_SERVICE_NAME": "support-svc"})
    assert "re-raised" in p.stdout
    return lake


def test_generic_steps(generic):
    (tr,) = trial_spans(generic, "generic")
    assert steps(tr) == [
        ("invoke_agent support-bot", "assay.trial generic"),
        ("chat gpt-test", "invoke_agent support-bot"),
        ("execute_tool lookup", "invoke_agent support-bot"),
        ("execute_tool charge_card", "invoke_agent support-bot"),
        ("plan plan-refund", "invoke_agent support-bot"),
        ("check-policy", "invoke_agent support-bot"),
        ("chat gpt-test", "invoke_agent support-bot"),
        ("respond answer", "invoke_agent support-bot"),
    ]
    by = {s["name"]: s for s in tr}
    look = by["execute_tool lookup"]
    assert jload(look["attributes"]["gen_ai.tool.call.arguments"]) == {"order_id": "A7", "verbose": False}
    assert jload(look["attributes"]["gen_ai.tool.call.result"]) == {"order": "A7", "paid": True}
    charge = by["execute_tool charge_card"]
    assert (charge["status_code"], charge["error_type"]) == (2, "ValueError")
    ev = query(generic, "SELECT name, attributes['exception.type'] AS t FROM span_events WHERE span_id = ?",
               [charge["span_id"]])
    assert ev == [{"name": "exception", "t": "ValueError"}]
    llm = [s for s in tr if s["op"] == "chat"]
    assert [(s["model"], s["provider"], s["input_tokens"], s["output_tokens"]) for s in llm] == [
        ("gpt-test", "openai", None, None), ("gpt-test", "openai", 40, 12)]
    assert [s["attributes"].get("assay.step.kind") for s in tr[1:]] == [
        "agent", "llm", "tool", "tool", "reason", "other", "llm", "respond"]
    r = root(tr)
    assert (r["outcome"], r["score"], r["version"], r["trial_index"]) == ("pass", 0.75, "v9", 0)
    assert all(s["scenario"] == "generic" and s["version"] == "v9" for s in tr)
    svc = query(generic, "SELECT DISTINCT service_name FROM spans")
    assert svc == [{"service_name": "support-svc"}]


def test_generic_steps_are_steps_of_every_kind_in_the_steps_view(generic):
    rows = query(generic, "SELECT s.name, s.step_kind, s.depth, s.llm_call FROM steps s JOIN trials t USING (trace_id) "
                          "WHERE t.scenario = 'generic' ORDER BY s.seq")
    assert [(r["name"], r["step_kind"], r["depth"]) for r in rows] == [
        ("invoke_agent support-bot", "agent", 1),
        ("chat gpt-test", "llm", 2),
        ("execute_tool lookup", "tool", 2),
        ("execute_tool charge_card", "tool", 2),
        ("plan plan-refund", "reason", 2),
        ("check-policy", "other", 2),        # no GenAI operation: assay.step.kind says what it is
        ("chat gpt-test", "llm", 2),         # the last LLM call, but the agent marked its answer itself
        ("respond answer", "respond", 2),
    ]
    (trial,) = query(generic, "SELECT n_steps, n_llm, input_tokens FROM trials WHERE scenario = 'generic'")
    assert trial == {"n_steps": 8, "n_llm": 2, "input_tokens": 40}


def test_exception_marks_trial_failed(generic):
    (crash,) = trial_spans(generic, "generic-crash")
    r = root(crash)
    assert (r["outcome"], r["error_class"], r["error_type"], r["status_code"]) == ("fail", "exception", "KeyError", 2)
    (slow,) = trial_spans(generic, "generic-timeout")
    assert (root(slow)["outcome"], root(slow)["error_class"]) == ("fail", "timeout")
    labelled = [root(t) for t in trial_spans(generic, "generic-labelled")]
    assert [(x["trial_index"], x["outcome"], x["error_class"]) for x in labelled] == [
        (41, "fail", "pre-validation"), (42, None, None)]
    ev = query(generic, "SELECT attributes['gen_ai.evaluation.score.label'] AS label FROM span_events "
                        "WHERE name = 'gen_ai.evaluation.result' AND span_id = ?", [r["span_id"]])
    assert ev == [{"label": "fail"}]


@pytest.mark.parametrize("mode", ["app-provider-first", "app-provider-after"])
def test_application_provider_is_kept_and_still_exports(tmp_path, mode):
    lake = tmp_path / "lake"
    p = run_script("core_run.py", lake, mode)
    out = dict(line.split(" ", 1) for line in p.stdout.splitlines() if line.split(" ", 1)[0].isupper())
    app_names = json.loads(out["APP_EXPORTER"])
    # the application's exporter sees its own spans and ours
    assert app_names == sorted(["http POST /chat", "assay.trial provider", "execute_tool lookup", "db.query"])
    # its spans inside the trial got the assay.* attributes too
    assert json.loads(out["APP_DB_ATTRS"])["assay.scenario"] == "provider"
    (tr,) = trial_spans(lake, "provider")
    # each span once: an export processor added twice (repeated import / instrument()) would
    # write every span twice
    assert [s["name"] for s in tr] == ["assay.trial provider", "execute_tool lookup", "db.query"]
    # the app span outside the trial is in the lake but carries no assay.* attributes
    outer = spans(lake, "name = 'http POST /chat'")
    assert len(outer) == 1 and outer[0]["scenario"] is None
    link = query(lake, "SELECT linked_span_id FROM span_links WHERE span_id = ?", [root(tr)["span_id"]])
    assert link == [{"linked_span_id": outer[0]["span_id"]}]


def test_disabled(tmp_path):
    lake = tmp_path / "lake"
    p = run_script("core_run.py", lake, "disabled", env={"OTEL_ASSAY_DISABLED": "1"})
    assert "flushed True" in p.stdout
    assert not lake.exists()


def test_burst_is_not_dropped(tmp_path):
    lake = tmp_path / "lake"
    p = run_script("core_run.py", lake, "burst", env={"OTEL_ASSAY_FLUSH_ROWS": "3000"})
    st = json.loads(p.stdout.strip().splitlines()[-1])
    assert st["spans_produced"] == st["spans_written"] == 20000
    counts = query(lake, "SELECT trial_index, count(*) AS n FROM spans WHERE scenario = 'burst' "
                         "GROUP BY 1 ORDER BY 1")
    assert counts == [{"trial_index": i, "n": 2500} for i in range(8)]


def test_flush_at_exit(tmp_path):
    lake = tmp_path / "lake"
    run_script("core_run.py", lake, "atexit", env={"OTEL_ASSAY_FLUSH_SECONDS": "3600"})
    (tr,) = trial_spans(lake, "atexit")
    assert [s["name"] for s in tr] == ["assay.trial atexit", "execute_tool only"]
    assert root(tr)["outcome"] == "pass"


def test_uninstrument(tmp_path):
    lake = tmp_path / "lake"
    p = run_script("core_run.py", lake, "uninstrument")
    assert "ACTIVE ['langchain']" in p.stdout
    (tr,) = trial_spans(lake, "after-uninstrument")  # the trial API itself keeps working
    assert len(tr) == 1


def test_otlp_exporter_to_a_collector(tmp_path):
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    with otlp_sink() as (endpoint, bodies):
        lake = tmp_path / "lake"
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
        p = run_script("core_run.py", lake, "otlp", env=env)
        # run_script sets OTEL_ASSAY_DIR; with it set, OTEL_ASSAY_EXPORTER=otlp selects OTLP explicitly
        assert json.loads(p.stdout.strip().splitlines()[-1])["exporter"] == "parquet"
        p = run_script("core_run.py", lake, "otlp", env={**env, "OTEL_ASSAY_EXPORTER": "otlp"})
        assert json.loads(p.stdout.strip().splitlines()[-1])["exporter"] == "otlp"
    names = {}
    for path, ctype, body in bodies:
        assert path == "/v1/traces" and ctype == "application/x-protobuf"
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    names[s.name] = {a.key: a.value for a in s.attributes}
    assert set(names) == {"assay.trial otlp", "execute_tool send"}
    assert names["execute_tool send"]["assay.scenario"].string_value == "otlp"
    assert names["assay.trial otlp"]["assay.trial.outcome"].string_value == "pass"
    # and the parquet run wrote the lake
    assert [s["name"] for s in trial_spans(lake, "otlp")[0]] == ["assay.trial otlp", "execute_tool send"]


def test_app_exporting_over_otlp_gets_each_span_once(tmp_path):
    # an application whose own provider exports over OTLP, configured the standard way
    # (OTEL_EXPORTER_OTLP_ENDPOINT), adds the import: otel-assay added a second OTLP exporter
    # to that provider, so the application's collector received every span twice
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    with otlp_sink() as (endpoint, bodies):
        p = run_script("core_run.py", tmp_path / "unused", "app-provider-otlp", str(tmp_path),
                       env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                            "OTEL_ASSAY_DIR": None})
    names = Counter(s.name for _, _, body in bodies
                    for rs in ExportTraceServiceRequest.FromString(body).resource_spans
                    for ss in rs.scope_spans for s in ss.spans)
    assert names == {"http POST /chat": 1, "assay.trial app-otlp": 1, "execute_tool lookup": 1}
    assert json.loads(p.stdout.strip().splitlines()[-1])["exporter"] == "parquet"
    # the trial is in the default lake (./traces of the application's directory)
    assert [s["name"] for s in trial_spans(tmp_path / "traces", "app-otlp")[0]] == [
        "assay.trial app-otlp", "execute_tool lookup"]


def test_trial_and_step_api_edges(tmp_path):
    lake = tmp_path / "lake"
    p = run_script("core_run.py", lake, "api-edges")
    # an infinite score would swamp every mean it enters, as NaN would poison it; passed="false"
    # would be a pass; an index that is not a non-negative int would not pair trials: all refused
    assert p.stdout.count("REFUSED") == 10, p.stdout
    (tr,) = trial_spans(lake, "bare-step")
    # a bare @otel_assay.step records a step of kind "other" named after the function
    assert steps(tr) == [("normalise", "assay.trial bare-step"), ("fetch", "assay.trial bare-step")]
    assert [s["attributes"]["assay.step.kind"] for s in tr[1:]] == ["other", "other"]
    assert (root(tr)["outcome"], root(tr)["score"]) == ("pass", None)
    # version=2 and a numeric run id are the strings "2" and "20260101" in the lake's columns
    (row,) = query(lake, "SELECT version, run_id FROM trials WHERE scenario = 'bare-step'")
    assert row == {"version": "2", "run_id": "20260101"}
    assert {(s["version"], s["run_id"]) for s in tr} == {("2", "20260101")}


def test_trial_the_sampler_drops_is_reported(tmp_path):
    lake = tmp_path / "lake"
    p = run_script("core_run.py", lake, "unsampled", env={"OTEL_TRACES_SAMPLER": "always_off"})
    # nothing reaches the lake, and that is said once, with the way out
    assert p.stderr.count("is not recorded") == 1, p.stderr
    assert "AlwaysOffSampler" in p.stderr and "OTEL_TRACES_SAMPLER" in p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1])["spans_produced"] == 0


def test_generator_steps_and_a_step_factory_shared_by_threads(tmp_path):
    lake = tmp_path / "lake"
    p = run_script("core_run.py", lake, "step-shapes")
    assert "Failed to detach context" not in p.stderr and "ended span" not in p.stderr, p.stderr
    (tr,) = trial_spans(lake, "step-shapes")
    ms = {s["name"]: s for s in tr}
    assert steps(tr) == [
        ("chat gpt-test", "assay.trial step-shapes"),
        ("token 0", "chat gpt-test"),          # the generator's own work is inside its step
        ("show t0", "assay.trial step-shapes"),  # the consumer's work between items is not
        ("token 1", "chat gpt-test"),
        ("show t1", "assay.trial step-shapes"),
        ("execute_tool search", "assay.trial step-shapes"),
        ("execute_tool pages", "assay.trial step-shapes"),
        ("execute_tool db", "assay.trial step-shapes"),
        ("execute_tool db", "assay.trial step-shapes"),
    ]
    # the steps last as long as their iteration, and record how it ended
    dur = {n: query(lake, "SELECT max(duration_ns) AS d FROM spans WHERE name = ?", [n])[0]["d"]
           for n in ("chat gpt-test", "execute_tool search", "execute_tool db")}
    assert dur["chat gpt-test"] > 50e6 and dur["execute_tool search"] > 80e6 and dur["execute_tool db"] > 150e6
    assert (ms["execute_tool pages"]["status_code"], ms["execute_tool pages"]["error_type"]) == (2, "ValueError")
    assert ms["execute_tool search"]["status_code"] == 0


def test_exit_and_interrupt_in_a_trial_are_no_agent_failures(tmp_path):
    lake = tmp_path / "lake"
    p = run_script("core_run.py", lake, "exits")  # exits 0: its last trial ends in sys.exit(0)
    assert p.stdout.count("PROPAGATED") == 5, p.stdout
    rows = {r["scenario"]: tuple(r.values())[1:] for r in query(
        lake, "SELECT scenario, outcome, error_class, counted, passed, n_tool FROM trials "
              "WHERE scenario <> 'implicit'")}
    assert rows == {
        "exit-0": ("pass", None, True, True, 1),           # sys.exit(0): the outcome it was given
        "exit-none": (None, None, True, None, 1),          # sys.exit(): no outcome given, none recorded
        "exit-2": ("fail", "exception", True, False, 1),   # a non-zero exit is a failure
        "ctrl-c": (None, "interrupted", True, None, 1),    # no verdict: unknown in pass rates
        "ctrl-c-judged": ("pass", "interrupted", True, True, 1),
        "exit-at-end": ("pass", None, True, True, 1),      # written at exit
    }
    roots = {r["scenario"] + str(r["trial_index"]): r for r in spans(lake, "parent_span_id IS NULL")}
    assert [(roots[k]["status_code"], roots[k]["error_type"]) for k in ("exit-00", "exit-none0", "ctrl-c0")] == [
        (0, None)] * 3
    assert (roots["exit-20"]["status_code"], roots["exit-20"]["error_type"]) == (2, "SystemExit")
    ev = query(lake, "SELECT attributes['exception.type'] AS t FROM span_events "
                     "WHERE span_id = ? AND name = 'exception'", [roots["ctrl-c0"]["span_id"]])
    assert ev == [{"t": "KeyboardInterrupt"}]
    assert [roots[k]["attributes"].get("assay.incomplete") for k in ("ctrl-c0", "exit-00")] == ["interrupted", None]
    # an implicit trial (an agent invocation that exited, or was interrupted) does not pass
    assert [(roots[k]["outcome"], roots[k]["error_class"]) for k in ("implicit0", "implicit1")] == [
        (None, None), (None, "interrupted")]
    (rate,) = query(lake, "SELECT n_unknown FROM pass_rates WHERE scenario = 'ctrl-c'")
    assert rate == {"n_unknown": 1}
