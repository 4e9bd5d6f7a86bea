"""Contracts on hand-built traces (real OTel SDK spans -> ParquetSpanExporter -> DuckDB views)."""

from __future__ import annotations

import json
import re

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from otel_assay.analyze.engine import Engine
from otel_assay.collect.exporter import ParquetSpanExporter
from otel_assay.oracles import ContractError, evaluate, outcome_from_contracts, parse_contracts, verdicts
from otel_assay.oracles.contracts import check_names


def final_message(text: str) -> str:
    return json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": "stop"}])


def cost_attr(t) -> dict:
    """A known cost as an attribute; "cost": None leaves the model unpriced (cost unknown)."""
    return {} if t.get("cost", 0.0) is None else {"llm.cost.total": t.get("cost", 0.0)}


def usage(t):
    """Each LLM call's usage: ``tokens`` input tokens, 0 output; ``output_only``: ``tokens`` output
    tokens and no input tokens reported (as some providers' streamed answers do)."""
    if t.get("output_only"):
        return {"gen_ai.usage.output_tokens": t.get("tokens", 10)}
    return {"gen_ai.usage.input_tokens": t.get("tokens", 10), "gen_ai.usage.output_tokens": 0}


def write_trials(lake, trials):
    """trials: dicts with scenario, version, tools [(name, args, error)], final, tokens, output_only,
    cost, seconds; args or final None: an answer or a call whose text was not recorded (content
    capture off)."""
    exp = ParquetSpanExporter(lake)
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    tracer = tp.get_tracer("tests.contracts")
    t0 = 1_763_000_000_000_000_000
    for i, t in enumerate(trials):
        common = {"assay.scenario": t.get("scenario", "s"), "assay.agent.version": t.get("version", "v1"),
                  "assay.trial.index": i}
        start = t0 + i * 10**12
        end = start + int(t.get("seconds", 1.0) * 1e9)
        root = tracer.start_span(f"assay.trial {common['assay.scenario']}", start_time=start, attributes={
            **common, **({"assay.error.class": t["error_class"]} if "error_class" in t else {})})
        from opentelemetry import trace
        ctx = trace.set_span_in_context(root)
        clock = start + 1000
        for name, args, error in t.get("tools", []):
            chat = tracer.start_span("chat m", context=ctx, start_time=clock, attributes={
                **common, "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                **usage(t),
                "gen_ai.response.finish_reasons": ("tool_calls",), **cost_attr(t)})
            chat.end(end_time=clock + 10)
            tool = tracer.start_span(f"execute_tool {name}", context=ctx, start_time=clock + 20, attributes={
                **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                **({} if args is None else {"gen_ai.tool.call.arguments": args})})
            if error:
                tool.set_status(Status(StatusCode.ERROR, "tool failed"))
            tool.end(end_time=clock + 30)
            clock += 100
        if "final" in t:
            chat = tracer.start_span("chat m", context=ctx, start_time=clock, attributes={
                **common, "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                **usage(t),
                "gen_ai.response.finish_reasons": ("stop",), **cost_attr(t),
                **({} if t["final"] is None else {"gen_ai.output.messages": final_message(t["final"])})})
            chat.end(end_time=clock + 10)
        root.end(end_time=end)
    tp.shutdown()


def judge(lake, spec):
    with Engine(lake) as eng:
        contracts = parse_contracts(spec)
        check_names(eng, contracts)
        return evaluate(eng, contracts)


A = ("lookup", '{"id": 5}', False)
B = ("refund", '{"amount": 100}', False)
C = ("email", '{"to": "x@y.z"}', False)


@pytest.mark.parametrize("spec, trials, expected", [
    ({"max_steps": 4}, [{"tools": [A]}, {"tools": [A, B]}, {"tools": [A, B], "final": "x"}], [True, True, False]),
    ({"max_tool_calls": 2}, [{"tools": [A, B]}, {"tools": [A, B, C]}], [True, False]),
    ({"must_call": ["lookup", "refund"]}, [{"tools": [A, B]}, {"tools": [B]}, {"final": "x"}], [True, False, False]),
    ({"never_call": "refund"}, [{"tools": [A]}, {"tools": [A, B]}], [True, False]),
    ({"call_order": ["lookup", "email"]}, [{"tools": [A, B, C]}, {"tools": [C, A]}, {"tools": [A, C]}, {"tools": [A]}],
     [True, False, True, False]),
    ({"max_cost_usd": 0.02}, [{"tools": [A], "final": "x", "cost": 0.01}, {"tools": [A], "final": "x", "cost": 0.011}],
     [True, False]),
    ({"max_tokens": 30}, [{"tools": [A], "final": "x", "tokens": 15}, {"tools": [A], "final": "x", "tokens": 16}],
     [True, False]),
    # calls that report output tokens only: judged on what they report, not left unjudged
    ({"max_tokens": 30}, [{"tools": [A], "final": "x", "tokens": 15, "output_only": True},
                          {"tools": [A], "final": "x", "tokens": 16, "output_only": True}], [True, False]),
    ({"max_latency_s": 2}, [{"tools": [A], "seconds": 2.0}, {"tools": [A], "seconds": 2.001}], [True, False]),
    ({"no_tool_errors": True}, [{"tools": [A, B]}, {"tools": [A, ("refund", "{}", True)]}], [True, False]),
    ({"final_output_matches": r"(?i)refund of \$\d+"}, [{"final": "Refund of $100 done"}, {"final": "no"}, {"tools": [A]}],
     [True, False, False]),
    ({"final_output_contains": "done"}, [{"final": "all done"}, {"final": "nope"}], [True, False]),
    ({"final_output_json_schema": {"type": "object", "required": ["status"]}},
     [{"final": '{"status": "ok"}'}, {"final": '{"x": 1}'}, {"final": "not json"}], [True, False, False]),
    ({"tool_args_schema": {"refund": {"type": "object", "properties": {"amount": {"type": "number", "maximum": 100}},
                                      "required": ["amount"]}}},
     [{"tools": [A, B]}, {"tools": [("refund", '{"amount": 101}', False)]}, {"tools": [("refund", "{}", False)]},
      {"tools": [A]}], [True, False, False, True]),
    ({"max_repeated_calls": 2}, [{"tools": [A, A]}, {"tools": [A, A, A]}, {"tools": [A, ("lookup", '{"id": 6}', False), A]}],
     [True, False, True]),
    ({"sql": "n_tool >= 2 AND scenario = 's'"}, [{"tools": [A, B]}, {"tools": [A]}], [True, False]),
])
def test_each_contract_kind_at_its_boundary(tmp_path, spec, trials, expected):
    write_trials(tmp_path, [dict(t, version=f"t{i:02d}") for i, t in enumerate(trials)])
    res = judge(tmp_path, [spec])
    name = next(k for k in spec)
    got = dict(zip(res.table.column("version").to_pylist(), res.holds(name)))
    assert [got[f"t{i:02d}"] for i in range(len(trials))] == expected


def test_unknown_cost_is_not_judged_and_verdicts_need_enough_trials(tmp_path):
    trials = [{"tools": [A], "final": "ok", "version": "v1"} for _ in range(73)]
    trials += [{"tools": [A], "final": "ok" if i % 4 else "bad", "version": "v2"} for i in range(60)]
    trials += [{"tools": [A], "final": "ok", "version": "v3", "cost": None} for _ in range(72)]
    write_trials(tmp_path, trials)
    res = judge(tmp_path, [{"final_output_contains": "ok"}, {"max_tool_calls": 1, "name": "lean"},
                           {"max_cost_usd": 1.0}])
    by = {(v.contract, v.version): v for v in verdicts(res)}
    assert by[("final_output_contains", "v1")].verdict == "PASS"  # 73/73: Wilson lower bound 0.950 >= 0.95
    assert by[("final_output_contains", "v3")].verdict == "INCONCLUSIVE"  # 72/72: 0.9493, one trial short
    assert by[("final_output_contains", "v2")].verdict == "FAIL" and by[("final_output_contains", "v2")].holds == 45
    unpriced = by[("max_cost_usd", "v3")]
    assert (unpriced.n, unpriced.unknown, unpriced.verdict) == (0, 72, "INCONCLUSIVE")
    assert by[("max_cost_usd", "v1")].n == 73
    outcomes = outcome_from_contracts(res, ["final_output_contains"])
    assert sum(1 for v in outcomes.values() if v is False) == 15


def test_scenario_scoped_contract_leaves_other_scenarios_unjudged(tmp_path):
    write_trials(tmp_path, [{"tools": [A], "scenario": "a"}, {"tools": [A, B], "scenario": "b"}])
    res = judge(tmp_path, [{"max_tool_calls": 1, "scenarios": ["a"]}])
    assert dict(zip(res.table.column("scenario").to_pylist(), res.holds("max_tool_calls"))) == {"a": True, "b": None}


def test_hostile_trace_values_are_only_data(tmp_path):
    evil = "x'); DROP VIEW steps; --"
    write_trials(tmp_path, [{"tools": [(evil, json.dumps({"q": "' OR 1=1 --"}), False)], "final": "' OR '1'='1" * 1000}])
    res = judge(tmp_path, [{"final_output_contains": "OR"}, {"never_call": [evil]}, {"call_order": [evil, evil]}])
    assert res.holds("final_output_contains") == [True]
    assert res.holds("never_call") == [False]
    assert res.holds("call_order") == [False]
    with Engine(tmp_path) as eng:
        assert eng.query("SELECT count(*) AS n FROM steps").column("n")[0].as_py() >= 1


@pytest.mark.parametrize("spec, message", [
    ([{"max_steps": -1}], "non-negative integer"),
    ([{"max_stepz": 3}], "unknown key 'max_stepz'"),
    ([{"max_steps": 3, "must_call": "a"}], "exactly one contract kind"),
    ([{"final_output_matches": "(unclosed"}], "invalid regular expression"),
    ([{"final_output_json_schema": {"type": "nonsense"}}], "invalid JSON schema"),
    ([{"max_steps": 3}, {"max_steps": 4}], "two contracts are named 'max_steps'"),
    ([{"max_steps": 3, "threshold": 1.5}], "threshold must be a number"),
    ([{"max_steps": 3, "threshold": 1}], "strictly between 0 and 1"),
    ("max_steps: 3", "expected a list"),
])
def test_bad_contracts_name_the_item(spec, message):
    with pytest.raises(ContractError, match=message):
        parse_contracts(spec)


def test_unknown_tool_and_bad_sql_are_config_errors(tmp_path):
    write_trials(tmp_path, [{"tools": [A]}])
    with pytest.raises(ContractError, match="unknown tool 'lookupp'.*lookup"):
        judge(tmp_path, [{"must_call": "lookupp"}])
    assert judge(tmp_path, [{"never_call": "delete_everything"}]).holds("never_call") == [True]
    with pytest.raises(ContractError, match="sql: expression"):
        judge(tmp_path, [{"sql": "no_such_column > 1"}])


def run_cli(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "otel_assay", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_contracts_command_end_to_end(tmp_path):
    lake = tmp_path / "lake"
    write_trials(lake, [{"tools": [A, B], "final": "refund done", "version": "v1"} for _ in range(80)]
                 + [{"tools": [B], "final": "no", "version": "v2"} for _ in range(10)])
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("contracts:\n  - must_call: lookup\n  - final_output_matches: refund\n    name: says-refund\n")
    r = run_cli("contracts", lake, "--config", cfg, "--select", "version=v1", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {(x["contract"], x["verdict"], x["trials"]) for x in rows} == {("must_call", "PASS", 80), ("says-refund", "PASS", 80)}
    r = run_cli("contracts", lake, "--config", cfg)
    assert r.returncode == 1 and "FAIL" in r.stdout
    r = run_cli("contracts", lake, "--config", cfg, "--select", "version=v3")
    assert r.returncode == 4 and "v1 (80)" in r.stderr
    r = run_cli("contracts", lake, "--config", cfg, "--select", "colour=red")
    assert r.returncode == 3 and "colour" in r.stderr
    cfg.write_text("contracts:\n  - must_call: lookup\n   bad: indent\n")
    r = run_cli("contracts", lake, "--config", cfg)
    assert r.returncode == 3 and "line 3" in r.stderr and "Traceback" not in r.stderr
    cfg.write_text("contracts:\n  - must_call: lookupp\n")
    r = run_cli("contracts", lake, "--config", cfg)
    assert r.returncode == 3 and "unknown tool 'lookupp'" in r.stderr
    cfg.write_text("contracts:\n  - max_steps: 5\n    scenarios: [nosuch]\n")  # judges nothing: a typo
    r = run_cli("contracts", lake, "--config", cfg)
    assert r.returncode == 3 and "scoped to scenarios the lake has no trials of (nosuch)" in r.stderr, r.stderr
    assert "scenarios in the lake: s" in r.stderr
    cfg.write_text("contracts: []\n")  # as `otel-assay init` writes it: the error says what to add
    r = run_cli("contracts", lake, "--config", cfg)
    assert r.returncode == 3 and "the contracts list is empty; add contracts such as" in r.stderr, r.stderr


def test_a_reader_that_stops_early_does_not_turn_passing_contracts_into_a_fail(tmp_path):
    """`contracts ... | head`: click exited 1 on the broken pipe, which reads as FAIL (under
    `set -o pipefail`, GitHub Actions' default shell, the step's exit code) although every
    contract held. A reader that exits at once (`true`) breaks the pipe before the first line."""
    import shlex
    import subprocess
    import sys

    lake = tmp_path / "lake"
    write_trials(lake, [{"tools": [A, B], "final": "refund done"} for _ in range(80)])
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("contracts:\n  - must_call: lookup\n")
    for fmt in ("table", "json"):
        cmd = shlex.join([sys.executable, "-m", "otel_assay", "contracts", str(lake), "--config", str(cfg),
                          "--format", fmt])
        p = subprocess.run(["bash", "-o", "pipefail", "-c", f"{cmd} | true"], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, (fmt, p.stderr)
        assert "Traceback" not in p.stderr and "Broken pipe" not in p.stderr, p.stderr


@pytest.mark.parametrize("spec, message", [
    # a contract named like a column of the results overwrote it: ArrowTypeError traceback
    ([{"max_steps": 3, "name": "scenario"}], "'scenario' cannot name a contract"),
    ([{"must_call": "a", "name": "trace_id"}], "'trace_id' cannot name a contract"),
    # NaN is the largest number to DuckDB: `cost_usd <= nan` held in every trial
    ([{"max_cost_usd": float("nan")}], "finite non-negative number, got nan"),
    ([{"max_latency_s": float("inf")}], "finite non-negative number, got inf"),
    ([{"max_cost_usd": 10**400}], "finite non-negative number"),  # OverflowError traceback
    # said "expected a tool name"
    ([{"max_steps": 3, "scenarios": [2024]}], r"expected a scenario name .*\(quote names YAML reads as numbers\)"),
])
def test_contracts_that_could_not_work_are_refused(spec, message):
    with pytest.raises(ContractError, match=message):
        parse_contracts(spec)


def test_unrecorded_outputs_and_arguments_are_not_judged_but_missing_answers_fail(tmp_path):
    """With content capture off (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=NO_CONTENT)
    a trial has a respond step and tool calls without text: those contracts cannot be judged
    for it (they FAILed every trial, a false block). A trial that never answered still fails."""
    write_trials(tmp_path, [{"tools": [("refund", None, False)], "final": None, "version": "t0"},
                            {"tools": [A], "version": "t1"},  # no respond step: no answer
                            {"tools": [("refund", None, False), ("refund", '{"amount": 900}', False)],
                             "final": '{"ok": 1}', "version": "t2"}])
    res = judge(tmp_path, [{"final_output_contains": "ok"}, {"final_output_matches": "o"},
                           {"final_output_json_schema": {"type": "object"}},
                           {"tool_args_schema": {"refund": {"properties": {"amount": {"maximum": 500}}}}}])
    got = {c.name: dict(zip(res.table.column("version").to_pylist(), res.holds(c.name))) for c in res.contracts}
    for name in ("final_output_contains", "final_output_matches", "final_output_json_schema"):
        assert got[name] == {"t0": None, "t1": False, "t2": True}, name
    # a recorded violation decides the trial even when another call's arguments are unknown
    assert got["tool_args_schema"] == {"t0": None, "t1": True, "t2": False}
    # calls without recorded arguments looked identical: three searches were "repeated calls"
    write_trials(tmp_path / "repeats", [
        {"tools": [("search", None, False)] * 3, "version": "t0"},
        {"tools": [("search", None, False), A, A], "version": "t1"},
        {"tools": [A, A, A, ("search", None, False)], "version": "t2"},
        {"tools": [("search", None, False), ("search", '{"q": 1}', False)], "version": "t3"}])
    rep = judge(tmp_path / "repeats", [{"max_repeated_calls": 2}])
    assert dict(zip(rep.table.column("version").to_pylist(), rep.holds("max_repeated_calls"))) == \
        {"t0": None, "t1": True, "t2": False, "t3": True}
    by = {(v.contract, v.version): v for v in verdicts(res)}
    assert (by[("final_output_contains", "t0")].n, by[("final_output_contains", "t0")].unknown) == (0, 1)
    assert by[("final_output_contains", "t0")].verdict == "INCONCLUSIVE"


def test_a_schema_ref_to_nowhere_is_a_config_error_not_a_traceback(tmp_path):
    write_trials(tmp_path, [{"tools": [B], "final": '{"a": 1}'}])
    for spec in ({"tool_args_schema": {"refund": {"$ref": "#/definitions/nope"}}},
                 {"final_output_json_schema": {"$ref": "#/definitions/nope"}}):
        with pytest.raises(ContractError, match=r"\$ref '#/definitions/nope' at /\$ref"):
            judge(tmp_path, [spec])


def test_call_order_sees_past_a_tool_name_with_a_newline(tmp_path):
    odd = ("multi\nline", "{}", False)
    write_trials(tmp_path, [{"tools": [A, odd, C]}])
    assert judge(tmp_path, [{"call_order": ["lookup", "email"]}]).holds("call_order") == [True]


def test_contract_name_and_nan_errors_exit_3_on_the_command_line(tmp_path):
    lake = tmp_path / "lake"
    write_trials(lake, [{"tools": [A], "final": "ok"}])
    cfg = tmp_path / "assay.yaml"
    for body in ("  - max_steps: 3\n    name: version\n", "  - max_cost_usd: .nan\n"):
        cfg.write_text("contracts:\n" + body)
        r = run_cli("contracts", lake, "--config", cfg)
        assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr


def test_contracts_that_judge_none_of_the_selected_trials_do_not_pass(tmp_path):
    """Every contract scoped to a scenario --select left out: no verdict, which exited 0."""
    lake = tmp_path / "lake"
    write_trials(lake, [{"tools": [A], "final": "ok", "scenario": sc} for sc in ("a", "b")])
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("contracts:\n  - max_steps: 5\n    scenarios: [a]\n")
    r = run_cli("contracts", lake, "--config", cfg, "--select", "scenario=b")
    assert r.returncode == 2 and "nothing was judged" in r.stderr, (r.returncode, r.stderr)


def test_trials_that_do_not_count_are_not_judged(tmp_path):
    """An infrastructure error (retried by `otel-assay run`) or an empty run has no tools and
    no answer: it was judged, and failed must_call and the output contracts, so a provider
    outage alone made a contract FAIL while the run and the pass rates excluded those trials."""
    lake = tmp_path / "lake"
    write_trials(lake, [{"tools": [A], "final": "ok"}] * 3
                 + [{"error_class": "infrastructure"}, {"error_class": "empty-run"}, {}])
    res = judge(lake, [{"must_call": "lookup"}, {"final_output_contains": "ok"}])
    assert res.holds("must_call") == [True] * 3 and res.holds("final_output_contains") == [True] * 3
    (v, _) = verdicts(res)
    assert (v.n, v.holds, v.unknown) == (3, 3, 0)
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("contracts:\n  - must_call: lookup\n")
    r = run_cli("contracts", lake, "--config", cfg, "--format", "json")
    assert json.loads(r.stdout)[0]["trials"] == 3 and r.returncode == 2, (r.stdout, r.stderr)


def test_sql_contracts_read_the_views_but_no_other_file(tmp_path):
    """A `sql:` contract ran on the analysis engine as it was: a config (from a pull request, run in CI
    with its secrets) read any file (`read_csv('/etc/passwd')`) or closed the query and ran another
    (`COPY ... TO`, `ATTACH`). It is judged in a locked-down copy of the engine: the trial's row and
    the lake's views, nothing else; the engine itself keeps its file access."""
    lake = tmp_path / "lake"
    write_trials(lake, [{"tools": [A, B]}, {"tools": [A]}])
    secret = tmp_path / "secret.csv"
    secret.write_text("token\nhunter2\n")
    written = tmp_path / "written.csv"
    steps = "(SELECT count(*) FROM steps s WHERE s.trace_id = facts.trace_id AND s.step_kind = 'tool') >= 2"
    with Engine(lake) as eng:
        res = evaluate(eng, parse_contracts([{"sql": steps, "name": "views"}, {"sql": "n_tool >= 1", "name": "row"},
                                             {"max_steps": 3}]))
        assert sorted(res.holds("views")) == [False, True] and res.holds("row") == [True, True]
        for expr, why in [
            (f"(SELECT count(*) FROM read_csv('{secret}')) > 0", "not other files or databases"),
            (f"(SELECT count(*) FROM '{secret}') > 0", "not other files"),  # a file read by its name
            (f"true) AS BOOLEAN) FROM facts; COPY (SELECT 1) TO '{written}'; SELECT trace_id, CAST((true",
             "not several statements"),
            (f"true) AS BOOLEAN) FROM facts; ATTACH '{tmp_path / 'x.db'}'; SELECT trace_id, CAST((true",
             "not several statements"),
            ("true) AS BOOLEAN) FROM facts UNION ALL SELECT 'x', CAST((true", "one value per trial"),
        ]:
            with pytest.raises(ContractError, match=f"contract 'leak': its sql: expression .* {why}"):
                evaluate(eng, parse_contracts([{"sql": expr, "name": "leak"}]))
        assert not written.exists() and not (tmp_path / "x.db").exists()
        # the analysis engine still reads files (the gate reads more of the lake after the contracts)
        assert eng.rows("SELECT count(*) FROM read_csv(?)", [str(secret)]) == [(1,)]
    r = run_cli("contracts", lake, "--config", _yaml(tmp_path, f"(SELECT count(*) FROM read_csv('{secret}')) > 0"))
    assert r.returncode == 3 and "contract 'sql'" in r.stderr and "not other files" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "hunter2" not in r.stdout + r.stderr


def _yaml(tmp_path, expr: str):
    cfg = tmp_path / "contracts.yaml"
    cfg.write_text(json.dumps({"contracts": [{"sql": expr}]}))  # JSON is YAML
    return cfg


class _CountingSchemaServer:
    """A real HTTP server on loopback that serves a schema nothing satisfies and counts the
    requests it gets: a gate config must never make the gate fetch anything."""

    def __init__(self):
        import http.server
        import threading

        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                body = b'{"not": {}}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/schema.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _WatchedFile:
    """A named pipe standing in for a local file: a writer thread waits for whoever opens it
    for reading and records that it was opened, so "the file was not read" is observed, not
    assumed (a plain file's access time is not kept on most mounts)."""

    def __init__(self, path):
        import os
        import threading

        self.path = path
        os.mkfifo(path)
        self.opened = threading.Event()

        def writer():
            with open(path, "w") as f:  # blocks until a reader opens the pipe
                self.opened.set()
                f.write('{"not": {}}')
        self.thread = threading.Thread(target=writer, daemon=True)
        self.thread.start()

    def close(self):
        import os

        if not self.opened.is_set():  # release the writer: open the reading end ourselves
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            self.thread.join(5)
            os.close(fd)


@pytest.mark.parametrize("kind", ["final_output_json_schema", "tool_args_schema"])
def test_a_schema_ref_outside_the_schema_is_refused_at_load_and_never_fetched(tmp_path, kind):
    """A gate config comes from the pull request it judges: a `$ref` to a URL made the gate
    send requests (and changed the verdict), a `file:///` ref read a local file. Refs resolve
    inside the schema only; anything else is a config error naming where the ref is."""
    lake = tmp_path / "lake"
    write_trials(lake, [{"tools": [B], "final": '{"amount": 1}'} for _ in range(3)])
    server = _CountingSchemaServer()
    watched = _WatchedFile(tmp_path / "schema.json")
    try:
        for ref in (server.url, watched.path.as_uri()):
            schema = {"type": "object", "properties": {"amount": {"$ref": ref}}}
            spec = {kind: schema if kind == "final_output_json_schema" else {"refund": schema}}
            cfg = tmp_path / "assay.yaml"
            cfg.write_text(json.dumps({"contracts": [spec]}))  # JSON is YAML
            r = run_cli("contracts", lake, "--config", cfg)
            assert r.returncode == 3, (ref, r.returncode, r.stdout, r.stderr)
            assert "Traceback" not in r.stderr
            assert "/properties/amount/$ref" in r.stderr and ref in r.stderr, r.stderr
            with pytest.raises(ContractError, match="resolves only inside the schema"):
                parse_contracts([spec])
        assert server.hits == []
        assert not watched.opened.is_set()
    finally:
        server.close()
        watched.close()


@pytest.mark.parametrize("schema", [
    {"$defs": {"pos": {"type": "number", "minimum": 0}}, "properties": {"amount": {"$ref": "#/$defs/pos"}}},
    {"$id": "https://example.invalid/order", "$defs": {"pos": {"$anchor": "pos", "minimum": 0}},
     "properties": {"amount": {"$ref": "#pos"}}},
    {"$defs": {"pos": {"$id": "pos.json", "minimum": 0}}, "properties": {"amount": {"$ref": "pos.json"}}},
])
def test_refs_inside_the_schema_still_work(tmp_path, schema):
    write_trials(tmp_path, [{"final": '{"amount": 1}', "version": "t0"}, {"final": '{"amount": -1}', "version": "t1"}])
    res = judge(tmp_path, [{"final_output_json_schema": schema}])
    assert res.table.num_rows == 2
    assert dict(zip(res.table.column("version").to_pylist(), res.holds("final_output_json_schema"))) == \
        {"t0": True, "t1": False}


def test_a_ref_to_a_meta_schema_or_a_missing_part_is_refused_at_load():
    for ref, where in (("https://json-schema.org/draft/2020-12/schema", "/$ref"),
                       ("#/definitions/nope", "/$ref")):
        with pytest.raises(ContractError, match=re.escape(where) + ".*resolves only inside the schema"):
            parse_contracts([{"final_output_json_schema": {"$ref": ref}}])
