"""The analysis commands end to end: selectors, formats, exit codes, labels."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import subprocess
import sys

import duckdb
import pytest

from otel_assay.cli import main

from .lakes import span, tid, write_lake


def run(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def A(version, outcome):
    return {"assay.scenario": "s1", "assay.agent.version": version, "assay.trial.outcome": outcome}


@pytest.fixture
def lake(tmp_path):
    spans = []
    for n, (version, outcome) in enumerate([("v1", "pass"), ("v1", "fail"), ("v2", "pass")], start=1):
        spans += [
            span(n, 1, None, "assay.trial s1", 0, 10, A(version, outcome)),
            span(n, 2, 1, "chat", 1, 2, {**A(version, outcome), "gen_ai.operation.name": "chat",
                                         "gen_ai.request.model": "gpt-4o" if n < 3 else "gpt-4o-mini",
                                         "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 2}),
            span(n, 3, 1, "execute_tool add", 3, 4, {**A(version, outcome), "gen_ai.operation.name": "execute_tool",
                                                     "gen_ai.tool.name": "add"}),
        ]
    # a foreign trace: no assay.* attributes, in a conversation
    spans.append(span(9, 1, None, "chat", 0, 1, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                                                  "gen_ai.conversation.id": "conv-9"}, scope="some.instrumentation"))
    return write_lake(tmp_path / "lake", spans)


def test_trials_select_and_formats(capsys, lake):
    code, out, _ = run(capsys, "trials", str(lake), "--select", "version=v1", "--format", "json")
    assert code == 0
    got = json.loads(out)
    assert sorted(t["trace_id"] for t in got) == [tid(1), tid(2)]
    code, out, _ = run(capsys, "trials", str(lake), "--select", "version=v1,outcome=pass", "--format", "csv")
    assert code == 0
    assert [r["trace_id"] for r in csv.DictReader(io.StringIO(out))] == [tid(1)]
    code, out, _ = run(capsys, "trials", str(lake), "--select", "model=gpt-4o-mini")
    assert code == 0 and tid(3) in out and tid(1) not in out and "(1 row)" in out


def test_unknown_selector_key_exits_3(capsys, lake):
    code, _, err = run(capsys, "steps", str(lake), "--select", "colour=blue")
    assert code == 3 and "'colour'" in err and "Traceback" not in err


def test_no_match_exits_4_with_what_was_found(capsys, lake):
    code, _, err = run(capsys, "fingerprint", str(lake), "--select", "version=v9")
    assert code == 4
    assert "no trials match version=v9" in err and "v1 (2)" in err and "v2 (1)" in err


def test_missing_lake_exits_4(capsys, tmp_path):
    code, _, err = run(capsys, "trials", str(tmp_path / "nope"))
    assert code == 4 and "does not exist" in err


def test_an_exported_span_file_given_as_the_lake_points_to_import(capsys, tmp_path):
    f = tmp_path / "traces.jsonl"
    f.write_text('{"resourceSpans": []}\n')
    code, _, err = run(capsys, "trials", str(f))
    assert code == 4 and "not a span lake" in err and "otel-assay import" in err


def test_a_directory_of_exported_span_files_given_as_the_lake_points_to_import(capsys, tmp_path):
    # it said only to point at the directory given to `collect --dir`, which such a user has not got
    (tmp_path / "exports").mkdir()
    (tmp_path / "exports" / "traces.jsonl").write_text('{"resourceSpans": []}\n')
    code, _, err = run(capsys, "trials", str(tmp_path / "exports"))
    assert code == 4 and "is not a span lake" in err and "otel-assay import" in err, err
    (tmp_path / "empty").mkdir()  # no files: nothing to import, no such hint
    code, _, err = run(capsys, "trials", str(tmp_path / "empty"))
    assert code == 4 and "is not a span lake" in err and "otel-assay import" not in err, err


@pytest.mark.parametrize("command", ["steps", "trials", "fingerprint", "coverage", "stability", "pass-rates"])
def test_every_command_runs(capsys, lake, command):
    code, out, err = run(capsys, command, str(lake), "--format", "json")
    assert code == 0, err
    assert isinstance(json.loads(out), list)


def test_help_is_complete(capsys):
    for command in ["steps", "trials", "fingerprint", "coverage", "stability", "pass-rates", "label"]:
        code, out, _ = run(capsys, command, "--help")
        assert code == 0 and "Usage:" in out
        if command != "label":
            assert "--select" in out and "--format" in out


def test_every_option_of_every_command_has_help():
    # `otel-assay COMMAND --help` documents every command: an option without a help text
    # shows up there as a bare name (sql, contracts and metamorphic had a silent --format)
    import click

    from otel_assay.cli import cli
    from otel_assay.cli.live import register
    if "run" not in cli.commands:
        register(cli)
    bare = [(name, p.opts) for name, c in cli.commands.items() for p in c.params
            if isinstance(p, click.Option) and not p.help and "--help" not in p.opts]
    assert not bare, bare


def test_fingerprint_tool_columns(capsys, lake):
    code, out, _ = run(capsys, "fingerprint", str(lake), "--tools", "add,search", "--format", "json")
    rows = {r["trace_id"]: r for r in json.loads(out)}
    assert rows[tid(1)]["tool:add"] == 0.5 and rows[tid(1)]["tool:search"] == 0.0


def test_a_tool_named_twice_in_the_vocabulary_gets_one_column(lake):
    # `--tools add,search,add` gave two `tool:add` columns: one name, two columns
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "otel_assay", "fingerprint", str(lake), "--tools", "add,search,add",
                        "--format", "csv"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    table = list(csv.reader(io.StringIO(r.stdout)))
    assert [c for c in table[0] if c.startswith("tool:")] == ["tool:add", "tool:search"]
    assert all(row[table[0].index("tool:add")] == "0.5" for row in table[1:4]), table


def test_stability_floor(capsys, lake):
    code, out, _ = run(capsys, "stability", str(lake), "--per-trial", "--floor", "1", "--format", "json")
    assert code == 0
    names = ["tool_usage_stability", "response_consistency", "redundancy", "cost_per_progress"]
    rows = json.loads(out)
    assert rows and all(r["drift_flags"] == [n for n in names if r[n] is not None and r[n] < 1] for r in rows)
    code, _, err = run(capsys, "stability", str(lake), "--floor", "speed=1")
    assert code == 3 and "speed" in err
    code, _, err = run(capsys, "stability", str(lake), "--floor", "redundancy=2")
    assert code == 3 and "between 0 and 1" in err


def _span_files_digest(lake):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((lake / "spans").rglob("*.parquet"))}


def test_label_by_trace_and_conversation(capsys, lake, tmp_path):
    before = _span_files_digest(lake)
    f = tmp_path / "labels.csv"
    f.write_text(f"trace_id,scenario,version,outcome\n{tid(1).upper()},relabelled,v7,fail\n")
    code, out, _ = run(capsys, "label", str(lake), "--file", str(f))
    assert code == 0 and "labelled 1" in out
    g = tmp_path / "conv.csv"
    g.write_text("gen_ai.conversation.id,scenario,version,outcome,score\nconv-9,foreign,v1,pass,0.75\n")
    assert run(capsys, "label", str(lake), "--file", str(g))[0] == 0
    code, out, _ = run(capsys, "trials", str(lake), "--format", "json")
    t = {r["trace_id"]: r for r in json.loads(out)}
    assert (t[tid(1)]["scenario"], t[tid(1)]["version"], t[tid(1)]["outcome"], t[tid(1)]["labelled"]) == (
        "relabelled", "v7", "fail", True)
    assert (t[tid(9)]["scenario"], t[tid(9)]["version"], t[tid(9)]["outcome"], t[tid(9)]["score"]) == (
        "foreign", "v1", "pass", 0.75)
    assert t[tid(2)]["labelled"] is False
    # a later label for the same key wins, column by column: the scenario labelled before stays
    f.write_text(f"trace_id,outcome\n{tid(1)},pass\n")
    run(capsys, "label", str(lake), "--file", str(f))
    code, out, _ = run(capsys, "trials", str(lake), "--select", "outcome=pass", "--format", "json")
    t = {r["trace_id"]: r for r in json.loads(out)}
    assert (t[tid(1)]["scenario"], t[tid(1)]["version"], t[tid(1)]["outcome"]) == ("relabelled", "v7", "pass")
    # an empty cell gives nothing either; identical repeated rows are one label
    f.write_text(f"trace_id,scenario,outcome\n{tid(1)},,fail\n{tid(1)},,fail\n")
    code, out, _ = run(capsys, "label", str(lake), "--file", str(f))
    assert code == 0 and "labelled 1 key" in out
    code, out, _ = run(capsys, "trials", str(lake), "--format", "json")
    t = {r["trace_id"]: r for r in json.loads(out)}
    assert (t[tid(1)]["scenario"], t[tid(1)]["outcome"]) == ("relabelled", "fail")
    assert _span_files_digest(lake) == before
    assert len(list((lake / "labels").glob("*.parquet"))) == 4


def test_labels_that_match_no_trace_are_written_with_a_warning(capsys, lake, tmp_path):
    f = tmp_path / "labels.csv"
    f.write_text(f"trace_id,scenario\n{tid(1)},s\n{'ab' * 16},s\n")
    code, out, err = run(capsys, "label", str(lake), "--file", str(f))
    assert code == 0 and "labelled 2 key(s)" in out
    assert "1 of 2 key(s) match no trace" in err
    g = tmp_path / "conv.csv"
    g.write_text("session.id,scenario\nnot-yet-recorded,s\n")  # a session recorded later picks it up
    code, _, err = run(capsys, "label", str(lake), "--file", str(g))
    assert code == 0 and "1 of 1 key(s) match no trace" in err
    f.write_text(f"trace_id,scenario\n{tid(1)},s\n")
    code, _, err = run(capsys, "label", str(lake), "--file", str(f))
    assert code == 0 and "warning" not in err


@pytest.mark.parametrize("content, message", [
    ("scenario,version\ns,v\n", "key column"),
    ("trace_id,outcome\nxyz,pass\n", "32 hex"),
    (f"trace_id,outcome\n{tid(1)},maybe\n", "pass, fail"),
    (f"trace_id,colour\n{tid(1)},red\n", "unknown column"),
    # which of two different labels for one key should win is the user's call
    (f"trace_id,outcome\n{tid(1)},pass\n{tid(1).upper()},fail\n", "labelled differently on line 2"),
    # a short row would erase its missing columns; a long one is a delimiter or quoting slip
    (f"trace_id,scenario,outcome\n{tid(1)},s\n", "line 2: 2 field(s), the header has 3"),
    (f"trace_id,outcome\n{tid(1)},pass,extra\n", "line 2: 3 field(s), the header has 2"),
    (f"trace_id;scenario;outcome\n{tid(1)};s;pass\n", "must be comma-separated"),
    (f"trace_id,outcome,outcome\n{tid(1)},pass,fail\n", "outcome appear more than once"),
])
def test_bad_labels_exit_3(capsys, lake, tmp_path, content, message):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    code, _, err = run(capsys, "label", str(lake), "--file", str(f))
    assert code == 3 and message in err
    assert not (lake / "labels").exists()


def test_price_override(capsys, lake, tmp_path):
    prices = tmp_path / "prices.csv"
    prices.write_text("provider,model,input_usd_per_mtok,output_usd_per_mtok\n,gpt-4o,1000000,0\n")
    code, out, _ = run(capsys, "steps", str(lake), "--select", "version=v1", "--prices", str(prices), "--format", "json")
    llm = [s for s in json.loads(out) if s["llm_call"]]
    assert [s["cost_usd"] for s in llm] == [10.0, 10.0]


def test_a_price_table_or_name_list_that_cannot_be_used_is_a_usage_error(capsys, lake, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("model;price\ngpt-4o;1\n")
    for args, needle in ((["--prices", str(tmp_path / "missing.csv")], "does not exist"),
                         (["--prices", str(bad)], "it needs a header")):
        code, _, err = run(capsys, "steps", str(lake), *args)
        assert code == 3 and needle in err, err
    for command, option in (("fingerprint", "--tools"), ("coverage", "--tools"), ("coverage", "--models")):
        code, _, err = run(capsys, command, str(lake), option, ",,")
        assert code == 3 and f"{option} ',,' names nothing" in err, err


def _explain_refusal(query: str) -> str:
    """What refuses ``query``: our check of the statement EXPLAIN ANALYZE would run, or, where
    this DuckDB's parser has no option list after EXPLAIN ANALYZE (before 2.0), its syntax error."""
    try:
        duckdb.extract_statements(query)
    except duckdb.ParserException:
        return "Parser Error: syntax error"
    return "EXPLAIN runs only on a query"


def test_sql_explain_analyze_cannot_write(capsys, lake):
    # EXPLAIN ANALYZE runs the statement it explains, and the locked-down engine may write
    # where it may read: a COPY under it put a file (a second copy of the spans) into the lake
    part = next((lake / "spans").glob("dt=*"))
    before = sorted(lake.rglob("*"))
    for query in (f"EXPLAIN ANALYZE COPY (FROM spans) TO '{part}/part-copy.parquet'",
                  f"EXPLAIN /* c */ ANALYSE (FORMAT json) COPY (SELECT 1) TO '{part}/x.csv'",
                  "explain analyze create table t as select 1"):
        code, _, err = run(capsys, "sql", str(lake), query)
        assert code == 3 and _explain_refusal(query) in err and "Traceback" not in err, (query, err)
    assert sorted(lake.rglob("*")) == before
    code, _, err = run(capsys, "sql", str(lake), "/* why */ COPY (SELECT 1) TO 'x.csv'")
    assert code == 3 and "COPY statements are not allowed" in err


@pytest.mark.parametrize("query", [
    "EXPLAIN ANALYZE SELECT count(*) FROM spans", "explain analyze (select 1)", "EXPLAIN (FORMAT json) FROM spans",
    "/* spans per trace */ SELECT count(*) FROM spans", "(SELECT 1) UNION ALL (SELECT 2)",
    # a leading -- comment is not taken for an unknown option
    "-- spans per trace\nSELECT count(*) FROM spans", "--count\nSELECT 1",
])
def test_sql_read_only_queries_pass_whatever_comes_first(capsys, lake, query):
    code, _, err = run(capsys, "sql", str(lake), query, "--format", "csv")
    assert code == 0, err


def test_sql_on_a_file_reads_no_other_file(capsys, lake, tmp_path):
    # the files themselves are readable, not their directory: ~/spans.parquet must not open ~/
    exports = tmp_path / "exports"
    (exports / "private").mkdir(parents=True)
    (exports / "private" / "key.txt").write_text("secret")
    f = exports / "spans.parquet"
    f.write_bytes(next((lake / "spans").rglob("*.parquet")).read_bytes())
    for source in (f, exports / "*.parquet"):
        code, out, err = run(capsys, "sql", str(source), f"SELECT content FROM read_text('{exports}/private/key.txt')")
        assert code == 3 and "secret" not in out and "may only read the lake" in err
        code, out, _ = run(capsys, "sql", str(source), "SELECT count(*) AS n FROM spans", "--format", "csv")
        assert code == 0 and out.splitlines()[1] == "10"


def test_sql_csv_keeps_every_digit_and_json_stays_json(capsys, lake):
    query = ("SELECT 1234567.891::DOUBLE AS a, 0.1::DOUBLE + 0.2 AS b, 'inf'::DOUBLE AS c, '-inf'::DOUBLE AS d, "
             "'nan'::DOUBLE AS e, ['inf'::DOUBLE, 1.5] AS f")
    code, out, _ = run(capsys, "sql", str(lake), query, "--format", "csv")
    assert code == 0 and out.splitlines()[1] == '1234567.891,0.30000000000000004,inf,-inf,,"[null,1.5]"'

    def reject(constant):
        raise ValueError(f"{constant} is not JSON")

    code, out, _ = run(capsys, "sql", str(lake), query, "--format", "json")
    assert code == 0
    assert json.loads(out, parse_constant=reject) == [
        {"a": 1234567.891, "b": 0.30000000000000004, "c": None, "d": None, "e": None, "f": [None, 1.5]}]


def test_sql_sums_are_json_numbers_and_booleans_are_spelt_as_in_the_lake(capsys, lake):
    # sum() over integers is a HUGEINT, which Arrow carries as a decimal: it came out as a string
    query = "SELECT sum(input_tokens) AS tokens, 2.50::DECIMAL(10, 2) AS price, count(*) > 0 AS any, false AS none FROM spans"
    code, out, _ = run(capsys, "sql", str(lake), query, "--format", "json")
    assert code == 0 and json.loads(out) == [{"tokens": 30, "price": 2.5, "any": True, "none": False}]
    code, out, _ = run(capsys, "sql", str(lake), query, "--format", "csv")
    assert code == 0 and out.splitlines()[1] == "30,2.50,true,false"


def test_sql_on_a_glob_of_partitioned_and_bare_files(capsys, lake):
    # DuckDB refuses to read files with and without a dt= directory together as hive
    # partitions; that was reported as a corrupt lake
    (lake / "spans" / "extra.parquet").write_bytes(next((lake / "spans").rglob("*.parquet")).read_bytes())
    code, out, err = run(capsys, "sql", str(lake / "spans" / "**" / "*.parquet"), "SELECT count(*) AS n FROM spans",
                         "--format", "csv")
    assert code == 0 and out.splitlines()[1] == "20", err


def test_select_a_value_with_a_comma(capsys, tmp_path):
    spans = [span(n, 1, None, "assay.trial", 0, 10, {"assay.scenario": scenario, "assay.agent.version": "v1"})
             for n, scenario in enumerate(["refund, damaged item", "refund"], start=1)]
    lake = write_lake(tmp_path / "lake", spans)
    for selector in ("scenario=refund, damaged item", "version=v1,scenario=refund, damaged item"):
        code, out, err = run(capsys, "trials", str(lake), "--select", selector, "--format", "json")
        assert code == 0, err
        assert [t["trace_id"] for t in json.loads(out)] == [tid(1)]
    code, _, err = run(capsys, "trials", str(lake), "--select", "scenario=refund,colour=red")
    assert code == 3 and "'colour'" in err


def test_an_empty_selector_value_selects_the_trials_without_one(capsys, lake):
    # the foreign trace has no version, no scenario and no outcome: "(none)" in listings
    for selector, want in (("outcome=", [tid(9)]), ("version=,model=gpt-4o", [tid(9)]),
                           ("version=v1,outcome=", [])):
        code, out, err = run(capsys, "trials", str(lake), "--select", selector, "--format", "json")
        if want:
            assert code == 0, err
            assert [t["trace_id"] for t in json.loads(out)] == want
        else:
            assert code == 4 and "no trials match version=v1,outcome=" in err


@pytest.mark.parametrize("args", [
    ("collect", "--dir", "{lake}", "--flush-seconds", "nan"),
    ("collect", "--dir", "{lake}", "--max-body-mib", "inf"),
    ("compact", "--dir", "{lake}", "--grace-seconds", "nan"),
    ("coverage", "{lake}", "--lambda", "nan"),
    ("gate", "{lake}", "--delta", "nan"),
    ("run", "{scenarios}", "--timeout", "nan"),
    ("mutate", "{scenarios}", "--alpha", "nan"),
])
def test_a_number_that_is_not_finite_is_a_usage_error(capsys, tmp_path, lake, args):
    # click's FloatRange lets NaN through (every comparison with it is false)
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text("agent: x:y\nscenarios: []\n")
    code, _, err = run(capsys, *(a.format(lake=lake, scenarios=scenarios) for a in args))
    assert code == 3 and "is not a finite number" in err, err


def test_sql_columns_named_alike_keep_their_own_values(capsys, lake):
    # a query over a join may name two columns alike (SELECT * over steps and trials has
    # input_tokens twice): each column shows its own values, not the last one's
    query = (f"SELECT s.seq AS n, t.n_steps AS n FROM steps s JOIN trials t USING (trace_id) "
             f"WHERE s.seq = 1 AND trace_id = '{tid(1)}'")
    code, out, _ = run(capsys, "sql", str(lake), query, "--format", "csv")
    assert code == 0
    assert out.splitlines()[:2] == ["n,n", "1,2"]
    code, out, _ = run(capsys, "sql", str(lake), query)
    assert code == 0 and out.splitlines()[2].split() == ["1", "2"]
    # a JSON object holds a key once: the second is renamed as DuckDB renames it in a subquery
    code, out, _ = run(capsys, "sql", str(lake), query, "--format", "json")
    assert code == 0 and json.loads(out) == [{"n": 1, "n_1": 2}]


EVIL = "bad\x1b]0;PWNED\x07\x1b[2Jname\nx"


@pytest.fixture
def evil_lake(tmp_path):
    a = {"assay.scenario": EVIL, "assay.agent.version": "v1", "assay.trial.outcome": "pass"}
    return write_lake(tmp_path / "lake", [
        span(1, 1, None, "assay.trial", 0, 10, a),
        span(1, 2, 1, "execute_tool", 1, 2, {**a, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": EVIL}),
    ])


def test_a_column_named_after_a_tool_reaches_the_terminal_escaped(capsys, evil_lake):
    # the fingerprint's tool:<name> column is named after the lake's tool name
    code, out, _ = run(capsys, "fingerprint", str(evil_lake))
    assert code == 0 and "\x1b" not in out and "\\x1b]0;PWNED" in out
    assert len(out.splitlines()) == 4  # header, rule, one row, count: no newline from the name


def test_no_trials_match_lists_the_lake_values_escaped(capsys, evil_lake):
    # the message lists the lake's scenarios, on stderr, which is the terminal
    code, _, err = run(capsys, "trials", str(evil_lake), "--select", "scenario=other")
    assert code == 4 and "\x1b" not in err and "\x07" not in err and "\\x1b]0;PWNED" in err


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_table_wider_than_the_terminal_keeps_every_value_whole(monkeypatch):
    import pyarrow as pa

    from otel_assay.report.output import write_table

    monkeypatch.setenv("COLUMNS", "80")
    wide = pa.table({"trace_id": [tid(1)], "scenario": ["refund-request"], "run_id": [tid(2)],
                     "duration_ns": [43142135], "per_protocol_rate": [0.833333]})
    out = _Terminal()
    write_table(wide, "table", out)
    # rich cut each cell to fit 80 columns: 43142…, a trace id nobody could copy
    text = out.getvalue()
    assert tid(1) in text and tid(2) in text and "43142135" in text and "0.833333" in text and "…" not in text
    out = _Terminal()
    write_table(pa.table({"scenario": ["refund-request"], "n": [3]}), "table", out)
    assert "│ refund-request │ 3 │" in out.getvalue()  # a table that fits is still drawn by rich


@pytest.fixture(scope="module")
def big_lake(tmp_path_factory):
    """1200 trials: the steps, trials, sql and fingerprint outputs are far larger than a pipe's
    buffer, so a reader that stops after one line breaks the pipe mid-output."""
    from ..gate.lakes import write_trials

    trials = [{"scenario": f"s{i % 3}", "version": v, "outcome": "fail" if i % 7 == 0 else "pass",
               "tools": ["lookup", "search"], "index": i} for v in ("v1", "v2") for i in range(600)]
    return write_trials(tmp_path_factory.mktemp("big") / "lake", trials, seed=1)


def _piped(args, reader: str):
    """``otel-assay ARGS | READER`` in bash under ``set -o pipefail`` (GitHub Actions' default
    shell): the pipeline's exit code is otel-assay's unless the reader fails."""
    import os
    import shlex
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    cmd = " ".join(shlex.quote(str(a)) for a in (sys.executable, "-m", "otel_assay", *args))
    return subprocess.run(["bash", "-o", "pipefail", "-c", f"{cmd} | {reader} >/dev/null"], capture_output=True,
                          text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args", [
    ("steps",), ("steps", "--format", "csv"), ("trials", "--format", "csv"), ("sql", "SELECT * FROM spans"),
    ("fingerprint",), ("coverage", "--sets"), ("stability", "--per-trial"),
])
def test_a_reader_that_stops_after_one_line_is_not_an_error(big_lake, args):
    """`otel-assay steps LAKE | head -1`: click turned the broken pipe into exit 1, which fails a
    script under `set -o pipefail`."""
    p = _piped((args[0], big_lake, *args[1:]), "head -1")
    assert p.returncode == 0, p.stderr
    assert p.stderr == "", p.stderr  # no traceback, no "Exception ignored ... BrokenPipeError"


@pytest.mark.parametrize("args, code", [
    (("pass-rates",), 0), (("coverage",), 0),
    # the decision's exit code stands when the reader is gone
    (("verdict", "--select", "version=v2", "--threshold", "0.99"), 1),
    (("regress", "--baseline", "version=v1", "--candidate", "version=v2"), 0),
    (("contracts", "--config", "CONFIG"), 0),
])
def test_a_reader_that_exits_before_the_output_keeps_the_exit_code(big_lake, tmp_path, args, code):
    """A reader that exits at once (`| true`) breaks the pipe before the first line, however short
    the output (exit 1, click's code for a broken pipe, would not tell the two apart)."""
    config = tmp_path / "contracts.yaml"
    config.write_text("contracts:\n  - max_steps: 12\n    threshold: 0.5\n")
    args = [str(config) if a == "CONFIG" else a for a in args]
    p = _piped((args[0], big_lake, *args[1:]), "true")
    assert p.returncode == code, p.stderr
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr and "Broken pipe" not in p.stderr, p.stderr


def test_ctrl_c_during_a_query_exits_130_without_a_traceback(lake, capsys):
    """DuckDB stops a query on Ctrl-C and raises RuntimeError('Query interrupted'), not
    KeyboardInterrupt: the CLI reported that as an internal error (a traceback, 'this is a
    bug', exit 4) instead of exiting 130 like any interrupted command."""
    import os
    import signal
    import threading

    # a process started in the background (a CI runner may start the tests so) inherits
    # SIGINT ignored; Ctrl-C at a terminal raises KeyboardInterrupt, as here
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        # seconds of DuckDB work, so that the signal arrives inside the query (DuckDB may
        # notice it only when the query ends; it raises all the same)
        code, out, err = run(capsys, "sql", str(lake), "SELECT sum(hash(range)) FROM range(1500000000)")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert code == 130, (code, err[-500:])
    assert "Traceback" not in err and "internal error" not in err, err


def test_text_that_is_not_utf8_is_a_one_line_error(capsys, lake, tmp_path):
    """Bytes that are not UTF-8 reach Python as lone surrogates (a path, a selector, a query
    typed in another locale); DuckDB cannot take them. They used to give a traceback (a lake
    path, a query) or blame the lake (a selector)."""
    import os
    import shutil

    odd = tmp_path / os.fsdecode(b"l\xffake")
    shutil.copytree(lake, odd)
    for command in (["trials", str(odd)], ["steps", str(odd)], ["sql", str(odd), "SELECT 1"]):
        code, out, err = run(capsys, *command)
        assert code == 4 and "not valid UTF-8" in err and "Traceback" not in err and "internal error" not in err, \
            (command, err)
        assert "rename" in err
    code, out, err = run(capsys, "trials", str(lake), "--select", "version=v1" + os.fsdecode(b"\xff\xfe"))
    assert code == 3 and "not valid UTF-8" in err and "lake" not in err.split("UTF-8")[0], err
    code, out, err = run(capsys, "sql", str(lake), "select '" + os.fsdecode(b"\xff") + "'")
    assert code == 3 and "not valid UTF-8" in err and "Traceback" not in err, err


def test_an_unreadable_label_file_is_named_and_nothing_is_written(capsys, lake, tmp_path):
    f = tmp_path / "labels.csv"
    f.write_text(f"trace_id,scenario,version,outcome\n{tid(1)},relabelled,v7,fail\n")
    assert run(capsys, "label", str(lake), "--file", str(f))[0] == 0
    (broken,) = (lake / "labels").glob("*.parquet")
    broken.write_bytes(broken.read_bytes()[:20])
    for command in (["trials", str(lake)], ["sql", str(lake), "SELECT 1"], ["label", str(lake), "--file", str(f)]):
        code, out, err = run(capsys, *command)
        assert code == 4 and "unreadable files in the lake" in err and broken.name in err, (command, err)
        assert "compact" not in err  # compact does not look at label files: the hint must not send users there
    assert list((lake / "labels").glob("*.parquet")) == [broken]  # the failed label command wrote nothing


@pytest.mark.parametrize("query", ["select * from force_checkpoint()",
                                   "SELECT error('not the lake')", "SELECT 'x'::INTEGER FROM spans"])
def test_a_query_error_is_a_usage_error_not_a_corrupt_lake(capsys, lake, query):
    """Only an error reading a lake file is the lake's (exit 4, with what to do about a corrupt
    Parquet file); a query DuckDB cannot run, whatever its error class (here a transaction
    error), is the query's: exit 3, no Parquet hint."""
    code, _, err = run(capsys, "sql", str(lake), query)
    assert code == 3, (code, err)
    assert "query failed" in err and "Parquet" not in err and "Traceback" not in err, err


def test_a_session_label_that_matches_several_traces_says_so_with_counts(capsys, tmp_path):
    # One run recorded as two traces (OpenInference's LangChain instrumentor, then its OpenAI
    # instrumentor outside the chain's context), both in session s-1; a second run is one
    # trace of session s-2. Each trace stays a trial of its own with the session's labels,
    # and `label` counts the traces it matched and names the keys that matched several
    lake = write_lake(tmp_path / "lake", [
        span(1, 1, None, "RunnableSequence", 0, 30, {"openinference.span.kind": "CHAIN", "session.id": "s-1"},
             scope="openinference.instrumentation.langchain"),
        span(1, 2, 1, "ChatOpenAI", 1, 20, {"openinference.span.kind": "LLM", "session.id": "s-1",
                                            "llm.model_name": "gpt-4o-mini", "llm.token_count.prompt": 11,
                                            "llm.token_count.completion": 7},
             scope="openinference.instrumentation.langchain"),
        span(2, 3, None, "ChatCompletion", 40, 60, {"openinference.span.kind": "LLM", "session.id": "s-1",
                                                    "llm.model_name": "gpt-4o-mini", "llm.token_count.prompt": 20,
                                                    "llm.token_count.completion": 5},
             scope="openinference.instrumentation.openai"),
        span(3, 4, None, "ChatCompletion", 100, 120, {"openinference.span.kind": "LLM", "session.id": "s-2",
                                                      "llm.model_name": "gpt-4o-mini", "llm.token_count.prompt": 9,
                                                      "llm.token_count.completion": 2},
             scope="openinference.instrumentation.openai"),
    ])
    f = tmp_path / "labels.csv"
    f.write_text("session.id,scenario,version,outcome\ns-1,math,v1,pass\ns-2,math,v1,fail\n")
    code, out, err = run(capsys, "label", str(lake), "--file", str(f))
    assert code == 0, err
    assert "labelled 2 key(s) matching 3 trace(s)" in out, out
    assert "1 of 2 key(s) match several traces (2 traces, at most 2 for one key)" in out, out
    assert "each trace is a trial of its own" in out and "warning" not in err, out + err
    code, out, _ = run(capsys, "trials", str(lake), "--format", "json")
    t = {r["trace_id"]: r for r in json.loads(out)}
    assert len(t) == 3
    assert [(t[tid(n)]["scenario"], t[tid(n)]["outcome"], t[tid(n)]["labelled"]) for n in (1, 2, 3)] == [
        ("math", "pass", True), ("math", "pass", True), ("math", "fail", True)]
    # keys that each match one trace: no note
    f.write_text("session.id,outcome\ns-2,pass\n")
    code, out, _ = run(capsys, "label", str(lake), "--file", str(f))
    assert code == 0 and "labelled 1 key(s) matching 1 trace(s)" in out and "several" not in out, out


SESSION_RUNS = '''
import sys
from openinference.instrumentation import using_session
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate

mem = InMemorySpanExporter()
tp = TracerProvider()
tp.add_span_processor(SimpleSpanProcessor(mem))
LangChainInstrumentor().instrument(tracer_provider=tp)
chain = ChatPromptTemplate.from_messages([("user", "{q}")]) | FakeListChatModel(responses=["5", "The answer is 5"])
with using_session("s-1"):  # one run of two calls, each a trace of its own
    chain.invoke({"q": "2 + 3?"})
    chain.invoke({"q": "say it"})
with using_session("s-2"):
    chain.invoke({"q": "2 + 3?"})
tp.shutdown()
open(sys.argv[1], "wb").write(encode_spans(mem.get_finished_spans()).SerializeToString())
'''


def test_session_labels_on_real_openinference_traces_count_the_traces(capsys, tmp_path):
    # OpenInference's LangChain instrumentor with using_session(): every call outside a
    # parent span is a trace of its own, each carrying session.id
    pytest.importorskip("openinference.instrumentation.langchain")
    script, data = tmp_path / "runs.py", tmp_path / "runs.bin"
    script.write_text(SESSION_RUNS)
    subprocess.run([sys.executable, str(script), str(data)], check=True, capture_output=True, timeout=120)
    lake = tmp_path / "lake"
    assert run(capsys, "import", str(data), "--dir", str(lake))[0] == 0
    f = tmp_path / "labels.csv"
    f.write_text("session.id,scenario,outcome\ns-1,math,pass\ns-2,math,fail\n")
    code, out, _ = run(capsys, "label", str(lake), "--file", str(f))
    assert code == 0 and "labelled 2 key(s) matching 3 trace(s)" in out, out
    assert "1 of 2 key(s) match several traces (2 traces, at most 2 for one key)" in out, out
    code, out, _ = run(capsys, "trials", str(lake), "--format", "json")
    trials = json.loads(out)
    assert sorted((t["scenario"], t["outcome"], t["n_llm"]) for t in trials) == [
        ("math", "fail", 1), ("math", "pass", 1), ("math", "pass", 1)]
