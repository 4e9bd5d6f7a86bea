"""Step files (analyze/stepfiles.py): a lake file's steps stored at compaction and read
instead of computed. They may change how fast an analysis is, never what it says."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from otel_assay.analyze import stepfiles
from otel_assay.analyze.coverage import coverage_sets
from otel_assay.analyze.stepfiles import STEPS_SCHEMA, _file_sum
from otel_assay.analyze.stepwrite import write_step_files
from otel_assay.cli import main
from otel_assay.lake.files import Lake

from .conftest import rows
from .lakes import span, write_lake
from .test_edge_cases import AGENT, TOOL, _compress_cache, _mixed_lake

CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.output_tokens": 100}


def answers(eng, chosen: bool = True):
    """What an analysis says about the lake: steps, trials, fingerprints, pass rates and
    the coverage sets of every trial and of 20 chosen ones (the restriction path)."""
    eng.materialize()
    eng.con.execute("CREATE OR REPLACE TEMP TABLE chosen AS SELECT trace_id FROM trials ORDER BY trace_id LIMIT 20")
    out = (rows(eng, "SELECT * FROM steps ORDER BY trace_id, seq"),
           rows(eng, "SELECT * FROM trials ORDER BY trace_id"),
           rows(eng, "SELECT * FROM fingerprints ORDER BY trace_id"),
           rows(eng, "SELECT * FROM pass_rates ORDER BY scenario, version"),
           coverage_sets(eng), coverage_sets(eng, "chosen") if chosen else None)
    return out


def stored_files(lake: Path) -> list[Path]:
    return sorted((lake / "steps").glob("dt=*/*.parquet"))


def named_by_its_sum(path: Path) -> Path:
    """Rename a step file to the checksum of what it now holds, so that only the checks of
    its content (metadata, columns) can tell it is wrong."""
    stem, definition, _ = path.name[:-len(".parquet")].rsplit(".", 2)
    new = path.with_name(f"{stem}.{definition}.{_file_sum(path)}.parquet")
    path.rename(new)
    return new


@pytest.mark.parametrize("compressed", [False, True])
def test_stored_steps_answer_as_steps_computed_from_spans(tmp_path, open_engine, monkeypatch, compressed):
    """Every recorded dialect, duplicates, orphans, a cycle; trials split across two files
    (computed from their spans) beside trials wholly inside one file (read from its step
    file); steps built in one go and in parts, cached as a table and compressed."""
    from otel_assay.analyze import engine as engine_mod

    _mixed_lake(tmp_path)
    _compress_cache(monkeypatch, compressed)
    computed = answers(open_engine(tmp_path, step_files=False))

    result = write_step_files(tmp_path)
    assert len(result.written) == len(Lake(tmp_path).live_files("spans")) >= 3 and not result.skipped
    eng = open_engine(tmp_path)
    assert len(eng.step_files) == len(result.written)
    split = eng.rows("SELECT count(*) FROM _split_trials")[0][0]
    assert split == 5  # traces 1..5 are in files a and b
    # the trials read from step files are not computed again
    from_spans = eng.rows("SELECT count(DISTINCT trace_id) FROM steps_between(NULL, NULL)")[0][0]
    assert from_spans == split
    stored = answers(eng)
    assert len(stored[0]) > 80 and stored[4].n_trials > 20
    assert stored == computed

    eng = open_engine(tmp_path)
    limit = engine_mod._bytes(eng.rows("SELECT current_setting('memory_limit')")[0][0])
    monkeypatch.setattr(engine_mod, "STEPS_BYTES_PER_SPAN", limit // 3 // 3)   # 3 spans per part
    assert answers(eng) == computed
    assert eng.steps_parts > 1


def test_a_step_file_that_does_not_match_its_span_file_is_not_read(tmp_path, open_engine, monkeypatch):
    spans = [span(t, 1, None, "invoke_agent a", 0, 10, AGENT) for t in range(1, 6)]
    spans += [span(t, 2, 1, "execute_tool t", 1, 2, TOOL) for t in range(1, 6)]
    write_lake(tmp_path, spans, token="a")
    (span_file,) = Lake(tmp_path).live_files("spans")
    write_step_files(tmp_path)
    assert len(open_engine(tmp_path).step_files) == 1
    computed = answers(open_engine(tmp_path, step_files=False))

    # another definition of `steps` (an upgrade that changes a rule)
    monkeypatch.setattr(stepfiles, "definition", lambda: "another")
    assert open_engine(tmp_path).step_files == {}
    monkeypatch.undo()

    # the span file replaced by other content under the same name
    (step_file,) = stored_files(tmp_path)
    saved = span_file.read_bytes()
    table = pq.read_table(span_file)
    pq.write_table(table.slice(0, 7), span_file)
    eng = open_engine(tmp_path)
    assert eng.step_files == {}
    assert eng.rows("SELECT count(*) FROM steps")[0][0] == 7
    span_file.write_bytes(saved)
    assert len(open_engine(tmp_path).step_files) == 1

    # one byte changed in a string (a Parquet reader would read it without complaint), and
    # step files that are corrupt, empty, of foreign columns or with metadata too deeply
    # nested for a JSON parser, each named by its own checksum: read as none, no error
    good = step_file.read_bytes()
    meta = pq.read_metadata(step_file).metadata
    flipped = bytearray(good)
    at = flipped.find(b"0000000000000001")
    assert at > 0
    flipped[at] = ord("9")
    nested = pq.read_table(step_file).replace_schema_metadata({b"otel_assay.steps": b"[" * 200_000 + b"]" * 200_000})
    for content in (bytes(flipped), b"PAR1 not parquet PAR1", b"", "foreign", "nested"):
        # a changed digit only the checksum can tell: renamed to its sum it would be read
        for p in stored_files(tmp_path):
            p.unlink()
        if content == "foreign":
            pq.write_table(pa.table({"trace_id": ["x"]}).replace_schema_metadata(meta), step_file)
        elif content == "nested":
            pq.write_table(nested, step_file)
        else:
            step_file.write_bytes(content)
        for renamed in (False,) if content == bytes(flipped) else (False, True):
            eng = open_engine(tmp_path)
            assert eng.step_files == {}
            assert answers(eng) == computed
            if not renamed:
                named_by_its_sum(step_file)
    for p in stored_files(tmp_path):
        p.unlink()
    step_file.write_bytes(good)
    assert len(open_engine(tmp_path).step_files) == 1
    assert answers(open_engine(tmp_path)) == computed


def test_stored_costs_are_priced_with_the_engine_price_table(tmp_path, open_engine):
    spans = []
    for t in range(1, 4):
        spans += [span(t, 1, None, "invoke_agent a", 0, 10, AGENT), span(t, 2, 1, "chat", 1, 2, CHAT),
                  span(t, 3, 1, "chat", 3, 4, {**CHAT, "gen_ai.request.model": "unknown-model"}),
                  span(t, 4, 1, "chat", 5, 6, {**CHAT, "llm.cost.total": 0.5})]
    write_lake(tmp_path, spans)
    write_step_files(tmp_path)
    prices = tmp_path / "prices.csv"
    prices.write_text("provider,model,input_usd_per_mtok,output_usd_per_mtok\n,gpt-4o,7,11\n,unknown,1,1\n")
    for kw, repriced in (({}, False), ({"prices": prices}, True)):
        eng = open_engine(tmp_path, **kw)
        assert len(eng.step_files) == 1
        assert eng.rows("SELECT stored_costs_repriced()")[0][0] is repriced
        computed = rows(open_engine(tmp_path, step_files=False, **kw),
                        "SELECT span_id, trace_id, cost_usd, cost_source FROM steps ORDER BY ALL")
        assert rows(eng, "SELECT span_id, trace_id, cost_usd, cost_source FROM steps ORDER BY ALL") == computed
        costs = {(r["span_id"][-1], r["cost_usd"] and round(r["cost_usd"], 9), r["cost_source"]) for r in computed}
        if repriced:
            assert costs == {("2", round(1000 / 1e6 * 7 + 100 / 1e6 * 11, 9), "price_table"),
                             ("3", round(1000 / 1e6 + 100 / 1e6, 9), "price_table"),
                             ("4", 0.5, "attribute"), ("1", None, None)}
        else:
            assert costs == {("2", round(1000 / 1e6 * 2.5 + 100 / 1e6 * 10, 9), "price_table"),
                             ("3", None, None), ("4", 0.5, "attribute"), ("1", None, None)}


def test_spans_that_arrive_after_the_step_file_join_their_trial(tmp_path, open_engine):
    """A late span of a trial whose steps are stored (the collector wrote it after
    compaction): the trial is computed from all its spans, the others stay stored."""
    spans = [span(t, 1, None, "invoke_agent a", 0, 10, AGENT) for t in range(1, 4)]
    spans += [span(t, 2, 1, "execute_tool t", 1, 2, TOOL) for t in range(1, 4)]
    write_lake(tmp_path, spans, token="a")
    write_step_files(tmp_path)
    write_lake(tmp_path, [span(2, 3, 1, "execute_tool u", 3, 4, {**TOOL, "gen_ai.tool.name": "u"})], token="b")
    eng = open_engine(tmp_path)
    assert len(eng.step_files) == 1
    assert eng.rows("SELECT count(*) FROM _split_trials")[0][0] == 1
    assert answers(eng) == answers(open_engine(tmp_path, step_files=False))
    assert rows(eng, "SELECT tool_name FROM steps WHERE trace_id = (SELECT trace_id FROM steps WHERE tool_name = 'u') "
                     "ORDER BY seq") == [{"tool_name": None}, {"tool_name": "t"}, {"tool_name": "u"}]


def test_steps_schema_is_the_views(tmp_path, open_engine):
    """The schema step files are checked against is the one `steps` computes."""
    write_lake(tmp_path, [span(1, 1, None, "invoke_agent a", 0, 10, AGENT)])
    got = open_engine(tmp_path, step_files=False).query("SELECT * FROM steps_between(NULL, NULL)").schema
    assert [(f.name, f.type) for f in got] == [(f.name, f.type) for f in STEPS_SCHEMA]


def run(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_compact_writes_step_files_and_sql_reads_them(tmp_path, capsys, open_engine):
    lake = tmp_path / "lake"
    for k in range(3):  # three small files, merged into one
        spans = [span(t, 1, None, "invoke_agent a", 0, 10, AGENT) for t in range(10 * k + 1, 10 * k + 11)]
        spans += [span(t, 2, 1, "execute_tool t", 1, 2, TOOL) for t in range(10 * k + 1, 10 * k + 11)]
        write_lake(lake, spans, token=f"f{k}")
    code, out, err = run(capsys, "compact", "--dir", str(lake), "--grace-seconds", "0")
    assert code == 0, err
    assert "compacted 3 files into 1" in out and "step files: 1 written, 0 up to date" in out
    (merged,) = Lake(lake).live_files("spans")
    (stored,) = stored_files(lake)
    assert stored.name.startswith(merged.stem + ".") and stored.parent.name == merged.parent.name
    eng = open_engine(lake)
    assert len(eng.step_files) == 1
    # a second run finds them current; the user's SQL (a locked-down engine) reads them
    code, out, _ = run(capsys, "compact", "--dir", str(lake))
    assert code == 0 and "step files: 0 written, 1 up to date, 0 removed" in out
    code, out, err = run(capsys, "sql", str(lake), "SELECT count(*) AS n FROM steps", "--format", "json")
    assert code == 0, err
    assert json.loads(out) == [{"n": 60}]

    # the span file gone (a later compaction merged it away): its step file goes too
    write_lake(lake, [span(99, 1, None, "invoke_agent a", 0, 10, AGENT)], token="late")
    code, out, _ = run(capsys, "compact", "--dir", str(lake), "--grace-seconds", "0")
    assert code == 0 and "step files: 1 written, 0 up to date, 1 removed" in out
    assert len(stored_files(lake)) == 1

    code, out, _ = run(capsys, "compact", "--dir", str(lake), "--no-step-files")
    assert code == 0 and "step files" not in out


def test_step_files_skip_what_they_cannot_store(tmp_path, capsys):
    """A span file without trace ids is always computed from its spans; a corrupt one is
    named (exit 4) and gets no step file; neither stops the others'."""
    lake = tmp_path / "lake"
    write_lake(lake, [span(1, 1, None, "invoke_agent a", 0, 10, AGENT)], token="good")
    pdir = next((lake / "spans").glob("dt=*"))
    good = next(pdir.glob("*.parquet"))
    table = pq.read_table(good)
    no_trace = table.set_column(table.schema.get_field_index("trace_id"), "trace_id",
                                pa.array([None], pa.string()))
    pq.write_table(no_trace, pdir / "part-notrace.parquet")
    (pdir / "part-corrupt.parquet").write_bytes(b"PAR1" + os.urandom(64) + b"PAR1")
    result = write_step_files(lake)
    assert [p.name.split(".")[0] for p in result.written] == [good.stem]
    assert [p.name for p in result.no_trace_id] == ["part-notrace.parquet"]
    assert len(result.skipped) == 1 and "part-corrupt.parquet" in result.skipped[0]
    code, out, err = run(capsys, "compact", "--dir", str(lake), "--target-mib", "1")
    assert code == 4
    assert "part-corrupt.parquet" in err and "1 span files left without (spans without a trace id)" in out


def test_step_files_are_never_read_as_spans(tmp_path, capsys, open_engine):
    """A step file has a span file's id and time columns: a glob over the whole lake skips
    it, and one given as the lake is refused (exit 4) instead of read as spans."""
    lake = tmp_path / "lake"
    write_lake(lake, [span(t, 1, None, "invoke_agent a", 0, 10, AGENT) for t in range(1, 6)] +
               [span(t, 2, 1, "execute_tool t", 1, 2, TOOL) for t in range(1, 6)])
    glob = str(lake / "*" / "dt=*" / "*.parquet")
    before = answers(open_engine(glob), chosen=False)
    write_step_files(lake)
    (step_file,) = stored_files(lake)
    assert answers(open_engine(glob), chosen=False) == before
    assert answers(open_engine(glob, step_files=False), chosen=False) == before
    code, out, err = run(capsys, "trials", str(step_file))
    assert code == 4 and "a step file" in err and "Traceback" not in err
    copied = tmp_path / "copy.parquet"  # a copy outside the lake is known by its metadata
    copied.write_bytes(step_file.read_bytes())
    code, out, err = run(capsys, "steps", str(copied))
    assert code == 4 and "a step file" in err
    code, out, err = run(capsys, "steps", str(lake / "steps" / "*" / "*.parquet"))  # a glob of step files only
    assert code == 4 and "matches only step files" in err


def test_damaged_step_files_are_not_read_and_compact_rewrites_them(tmp_path, capsys, open_engine):
    lake = tmp_path / "lake"
    write_lake(lake, [span(t, 1, None, "invoke_agent a", 0, 10, AGENT) for t in range(1, 40)] +
               [span(t, 2, 1, "execute_tool t", 1, 2, {**TOOL, "gen_ai.tool.call.arguments": '{"q": %d}' % t})
                for t in range(1, 40)])
    computed = answers(open_engine(lake, step_files=False))
    write_step_files(lake)
    (step_file,) = stored_files(lake)
    good = step_file.read_bytes()

    # data pages damaged under an intact footer: not read (the analysis computes from the
    # spans), and compact deletes it and writes it again
    damaged = bytearray(good)
    damaged[100:400] = bytes(300)
    step_file.write_bytes(bytes(damaged))
    code, out, err = run(capsys, "steps", str(lake), "--format", "json")
    assert code == 0, err
    assert answers(open_engine(lake)) == computed
    code, out, err = run(capsys, "compact", "--dir", str(lake))
    assert code == 0, err
    assert f"removed damaged step file {step_file}" in err and "step files: 1 written" in out
    assert len(stored_files(lake)) == 1 and len(open_engine(lake).step_files) == 1
    assert answers(open_engine(lake)) == computed

    # a step file of another definition (another otel-assay version, whose analyses may be
    # reading it) is removed only a grace period after a compaction first finds it
    (current,) = stored_files(lake)
    other = current.with_name(current.name.split(".")[0] + ".0123456789abcdef." + current.name.split(".")[2] + ".parquet")
    other.write_bytes(current.read_bytes())
    code, out, _ = run(capsys, "compact", "--dir", str(lake))
    assert code == 0 and "0 written, 1 up to date, 0 removed" in out and other.exists()
    code, out, _ = run(capsys, "compact", "--dir", str(lake), "--grace-seconds", "0")
    assert code == 0 and "0 written, 1 up to date, 1 removed" in out and not other.exists()
    assert stored_files(lake) == [current]


def test_compaction_writes_step_files_with_the_shipped_prices(tmp_path, capsys, monkeypatch, open_engine):
    """A user's price table (OTEL_ASSAY_PRICES) has no say in what compaction stores, and a
    missing one does not stop it: stored costs are priced again when read."""
    lake = tmp_path / "lake"
    write_lake(lake, [span(1, 1, None, "invoke_agent a", 0, 10, AGENT), span(1, 2, 1, "chat", 1, 2, CHAT)])
    monkeypatch.setenv("OTEL_ASSAY_PRICES", str(tmp_path / "missing.csv"))
    code, out, err = run(capsys, "compact", "--dir", str(lake))
    assert code == 0 and "1 written" in out, err
    monkeypatch.delenv("OTEL_ASSAY_PRICES")
    eng = open_engine(lake)
    assert len(eng.step_files) == 1 and eng.rows("SELECT stored_costs_repriced()")[0][0] is False
    assert eng.rows("SELECT cost_usd FROM steps WHERE llm_call")[0][0] == pytest.approx(1000 / 1e6 * 2.5 + 100 / 1e6 * 10)


def test_step_files_that_cannot_be_written_are_a_warning(tmp_path, capsys, monkeypatch, open_engine):
    """Compaction has done its work and step files are a cache: a step file that cannot be
    written (out of memory, no directory) is named with what to do, exit 0, and the span
    file is not called unreadable."""
    lake = tmp_path / "lake"
    write_lake(lake, [span(t, 1, None, "invoke_agent a", 0, 10, AGENT) for t in range(1, 6)])
    (lake / "steps").write_text("not a directory")
    code, out, err = run(capsys, "compact", "--dir", str(lake))
    assert code == 0, err
    assert "could not write step file" in err and "1 step files not written" in err
    assert "unreadable" not in err and "Traceback" not in err
    assert open_engine(lake).rows("SELECT count(*) FROM steps")[0][0] == 5

    (lake / "steps").unlink()
    monkeypatch.setenv("OTEL_ASSAY_MEMORY_LIMIT", "1MB")
    code, out, err = run(capsys, "compact", "--dir", str(lake))
    assert code == 0 and "could not write step file" in err and "OTEL_ASSAY_MEMORY_LIMIT" in err
    assert stored_files(lake) == []


def test_price_tables_that_differ_only_in_a_missing_value_are_told_apart(tmp_path, open_engine):
    from otel_assay.analyze.stepfiles import price_table_hash

    write_lake(tmp_path / "lake", [span(1, 1, None, "invoke_agent a", 0, 10, AGENT)])
    hashes = []
    for row in (",gpt-4o,,10", ",gpt-4o,10,"):
        prices = tmp_path / f"p{len(hashes)}.csv"
        prices.write_text("provider,model,input_usd_per_mtok,output_usd_per_mtok\n" + row + "\n")
        hashes.append(price_table_hash(open_engine(tmp_path / "lake", prices=prices).con))
    assert hashes[0] != hashes[1]


def test_step_files_are_written_only_into_a_lake(tmp_path, capsys):
    from otel_assay.lake.files import LakeError

    with pytest.raises(LakeError, match="not a span lake"):
        write_step_files(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing created in a directory that is not a lake
    code, _, err = run(capsys, "compact", "--dir", str(tmp_path), "--no-step-files=yes")
    assert code == 3 and "--no-step-files" in err
