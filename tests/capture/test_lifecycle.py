"""Trial lifecycle edge cases (real LangGraph, scripted offline model, real lake): forked
multiprocessing children, a trial entered twice, a late outcome, a stream the caller stops
reading, threads that outlive the trial they were started in."""

from collections import Counter

import pytest

from ._helpers import need  # noqa: E402

need("langgraph")

from ._helpers import otlp_sink, query, root, run_script, spans, trial_spans  # noqa: E402


def test_forked_children_write_their_trials_once(tmp_path):
    lake = tmp_path / "lake"
    # a large flush age: only flushes on demand, at trial end in pool workers and at exit write
    p = run_script("lifecycle_run.py", lake, "fork", env={"OTEL_ASSAY_FLUSH_SECONDS": "3600"})
    assert "FLUSHED True" in p.stdout
    assert "otel-assay" not in p.stderr, p.stderr  # no "produced but not written" gap in any process
    counts = {sc: len(trial_spans(lake, sc)) for sc in ("parent", "pool", "process", "age")}
    # Pool workers (terminated by `with Pool()`), Process children (exit through os._exit),
    # a child that flushed mid-way, and one whose flush thread wrote before os._exit
    assert counts == {"parent": 1, "pool": 4, "process": 3, "age": 1}
    # the parent's spans, buffered when the children forked, are written once
    dup = query(lake, "SELECT span_id, count(*) AS n FROM spans GROUP BY 1 HAVING n > 1")
    assert dup == []
    (parent,) = trial_spans(lake, "parent")
    assert len(parent) == 5  # trial, agent, chat, tool, chat
    # every child has its own run id, so no two trials share (run_id, scenario, version, index)
    keys = query(lake, "SELECT run_id, scenario, version, trial_index, count(*) AS n FROM trials GROUP BY ALL")
    assert len(keys) == 9 and all(k["n"] == 1 for k in keys)
    assert len({k["run_id"] for k in keys}) >= 4  # parent, 1-2 pool workers, 3 processes
    for sc in ("pool", "process", "age"):
        for tr in trial_spans(lake, sc):
            assert len(tr) == 5 and root(tr)["outcome"] == "pass"
            assert {s["run_id"] for s in tr} == {root(tr)["run_id"]}


def test_forked_children_export_otlp_once(tmp_path):
    # behind a BatchSpanProcessor (which resets its own queue and thread in a child) the
    # children's spans still need the exit / per-trial flush
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    with otlp_sink() as (endpoint, bodies):
        p = run_script("lifecycle_run.py", tmp_path / "lake", "fork", env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_ASSAY_EXPORTER": "otlp"})
    assert "FLUSHED True" in p.stdout
    names = Counter(s.name for _, _, body in bodies
                    for rs in ExportTraceServiceRequest.FromString(body).resource_spans
                    for ss in rs.scope_spans for s in ss.spans)
    assert {n: c for n, c in names.items() if n.startswith("assay.trial")} == {
        "assay.trial parent": 1, "assay.trial pool": 4, "assay.trial process": 3, "assay.trial age": 1}
    assert names["invoke_agent calc"] == 9


def test_trial_entered_twice_or_outcome_after_end_raise(tmp_path):
    lake = tmp_path / "lake"
    p = run_script("lifecycle_run.py", lake, "misuse")
    assert "REENTER otel_assay: trial 'reused' was already entered" in p.stdout
    assert "call otel_assay.trial(...) for each trial" in p.stdout
    assert "LATE OUTCOME otel_assay: outcome() called after trial 'reused' ended" in p.stdout
    assert "EARLY OUTCOME otel_assay: outcome() called before trial 'reused' was entered" in p.stdout
    assert "CURRENT SPAN VALID False" in p.stdout
    (tr,) = trial_spans(lake, "reused")
    assert root(tr)["outcome"] == "pass"
    assert len(spans(lake, "name = 'assay.trial reused'")) == 1


@pytest.mark.parametrize("implicit", [False, True])
def test_stream_stopped_early_is_not_an_error(tmp_path, implicit):
    lake = tmp_path / "lake"
    run_script("lifecycle_run.py", lake, "stream", env={"OTEL_ASSAY_SCENARIO": "stream-implicit" if implicit else None})
    scenarios = ["stream-implicit"] if implicit else ["stream-break", "stream-close"]
    for sc in scenarios:
        (tr,) = trial_spans(lake, sc)
        agent = [s for s in tr if s["name"] == "invoke_agent calc"]
        assert len(agent) == 1 and agent[0]["status_code"] != 2 and agent[0]["error_type"] is None
        r = root(tr)
        if implicit:  # the invocation did not complete: no verdict (an explicit trial has the caller's)
            assert (r["outcome"], r["error_class"], r["status_code"]) == (None, "caller_stopped", 0)
            assert agent[0]["attributes"]["assay.incomplete"] == "caller_stopped"
        else:
            assert (r["outcome"], r["error_class"], r["status_code"]) == ("pass", None, 0)


def test_an_interrupted_graph_invocation_is_no_passed_trial(tmp_path):
    # human in the loop under OTEL_ASSAY_SCENARIO: the invocation that pauses (interrupt() in a
    # node, an interrupt_before breakpoint) has no verdict; its resume is a trial of its own
    # that names the one it continues
    lake = tmp_path / "lake"
    p = run_script("lifecycle_run.py", lake, "interrupt", env={"OTEL_ASSAY_SCENARIO": "hitl"})
    assert "FLUSHED True" in p.stdout
    rows = query(lake, "SELECT trace_id, outcome, error_class, passed, n_llm, n_tool FROM trials "
                       "WHERE scenario = 'hitl' ORDER BY trial_index")
    assert [tuple(r.values())[1:] for r in rows] == [
        (None, "interrupted", None, 1, 0),   # interrupt() in a node
        ("pass", None, True, 1, 1),          # resumed: the tool, the answer
        (None, "interrupted", None, 1, 0),   # interrupt_before the tools node (ainvoke)
        ("pass", None, True, 1, 1),
        ("pass", None, True, 2, 1),          # no human asked
    ]
    agents = spans(lake, "name = 'invoke_agent calc' AND scenario = 'hitl'")
    assert [(a["status_code"], a["attributes"].get("assay.incomplete"), a["attributes"].get("assay.resumes"))
            for a in agents] == [(0, "interrupted", None), (0, None, rows[0]["trace_id"]),
                                 (0, "interrupted", None), (0, None, rows[2]["trace_id"]), (0, None, None)]
    (rate,) = query(lake, "SELECT n_trials, n_unknown, per_protocol_n FROM pass_rates WHERE scenario = 'hitl'")
    assert rate == {"n_trials": 5, "n_unknown": 2, "per_protocol_n": 3}
    # inside an explicit trial the caller judges the whole conversation; the paused invocation
    # is still marked
    (tr,) = trial_spans(lake, "hitl-trial")
    assert root(tr)["outcome"] == "pass" and root(tr)["error_class"] is None
    assert [s["attributes"].get("assay.incomplete") for s in tr if s["name"] == "invoke_agent calc"] == [
        "interrupted", None]


def test_threads_outliving_a_trial_do_not_carry_it(tmp_path):
    lake = tmp_path / "lake"
    p = run_script("lifecycle_run.py", lake, "threads")
    assert "BG IN TRIAL 0 True" in p.stdout
    # a worker started in trial 0 is not in trial 1, nor in a trial after both ended
    assert "BG IN TRIAL 1 False" in p.stdout and "BG AFTER TRIALS False" in p.stdout
    traces = trial_spans(lake, "threads")
    assert len(traces) == 2
    for i, tr in enumerate(traces):
        args = {s["attributes"].get("gen_ai.tool.call.arguments") for s in tr}
        # a thread living within the trial still belongs to it
        assert f'{{"tag": "thread-{i}"}}' in args
        # multiprocessing.pool.ThreadPool workers are long-lived: first started inside
        # trial 0, they must not carry it into trial 1 (or anything after)
        assert not any("tp-" in (a or "") for a in args)
    tp = spans(lake, "attributes['gen_ai.tool.call.arguments'] LIKE '%tp-%'")
    assert len(tp) == 2 and all(s["scenario"] is None for s in tp)


def test_a_resume_is_an_answer_to_the_same_graph(tmp_path):
    lake = tmp_path / "lake"
    p = run_script("lifecycle_run.py", lake, "resume-keys", env={"OTEL_ASSAY_SCENARIO": "keys"})
    assert "FLUSHED True" in p.stdout
    agents = spans(lake, "name LIKE 'invoke_agent %' AND scenario = 'keys'")
    agents.sort(key=lambda a: a["start_time_unix_nano"])
    got = [(a["name"], a["attributes"].get("assay.incomplete"), a["attributes"].get("assay.resumes"))
           for a in agents]
    first, fourth = agents[0]["trace_id"], agents[3]["trace_id"]
    assert got == [("invoke_agent calc", "interrupted", None),
                   ("invoke_agent other", None, None),         # another graph on thread id "1"
                   ("invoke_agent calc", None, first),          # the answer to the pause
                   ("invoke_agent calc", "interrupted", None),
                   ("invoke_agent calc", None, None)], (got, fourth)  # fresh input: no answer
