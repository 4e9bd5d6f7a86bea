"""`otel-assay import` on files written with the SDK's own OTLP encoders, through the real CLI."""

from __future__ import annotations

import gzip
import io
import json
import struct
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import zstandard
from ..otlp_json import otlp_json
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto

from otel_assay.lake.files import Lake

from .conftest import expected_view, lake_view, recorded_trials


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "otel_assay", *map(str, args)], capture_output=True, text=True, timeout=120)


def jsonl(spans, per_line=5) -> bytes:
    lines = [json.dumps(otlp_json(spans[i:i + per_line])) for i in range(0, len(spans), per_line)]
    return ("\n".join(lines) + "\n").encode()


def length_prefixed(spans, per_record=5) -> bytes:
    out = b""
    for i in range(0, len(spans), per_record):
        body = encode_proto(spans[i:i + per_record]).SerializeToString()
        out += struct.pack(">I", len(body)) + body
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "jsonl.zst", "document", "binpb", "binpb.zst"])
def test_import_round_trips_sdk_encoded_files(tmp_path, fmt):
    spans = recorded_trials(5)
    if fmt.startswith("jsonl"):
        data = jsonl(spans)
    elif fmt == "document":
        data = json.dumps(otlp_json(spans), indent=2).encode()
    else:
        data = length_prefixed(spans)
    if fmt.endswith(".gz"):
        data = gzip.compress(data)
    elif fmt.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    f = tmp_path / f"traces.{fmt}"
    f.write_bytes(data)
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 0, r.stderr
    assert f"imported {len(spans)} spans" in r.stdout
    assert lake_view(tmp_path / "lake") == expected_view(spans)
    # importing the same file again stores nothing twice
    assert run_cli("import", f, "--dir", tmp_path / "lake").returncode == 0
    assert lake_view(tmp_path / "lake") == expected_view(spans)


def test_a_file_imported_before_a_compaction_is_not_imported_again(tmp_path):
    lake = tmp_path / "lake"
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(jsonl(recorded_trials(3)) + b"{not json\n")  # one bad line: the rest is imported
    b.write_bytes(jsonl(recorded_trials(2)))
    assert run_cli("import", a, b, "--dir", lake).returncode == 4
    n = sum(pq.read_metadata(f).num_rows for f in Lake(lake).live_files())
    # compaction renames the imported files, so their names no longer tell that a.jsonl is in
    assert run_cli("compact", "--dir", lake, "--grace-seconds", "0").returncode == 0
    r = run_cli("import", a, "--dir", lake)
    assert r.returncode == 0 and "skipped: the same content was imported before" in r.stdout, r.stdout + r.stderr
    files = Lake(lake).live_files()
    assert len(files) == 1 and pq.read_table(files[0]).num_rows == n


def test_bad_lines_are_reported_and_good_lines_kept(tmp_path):
    spans = recorded_trials(3)
    good = jsonl(spans, per_line=len(spans)).strip()
    bad_span = otlp_json(spans[:1])
    bad_span["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "nothex!!nothex!!"
    f = tmp_path / "mixed.jsonl"
    f.write_bytes(good + b"\n{not json\n\xff\xfe\n" + json.dumps(bad_span).encode() + b"\n")
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4
    assert "line 2: not valid JSON" in r.stderr and "line 3: not UTF-8" in r.stderr
    assert "span_id is not hexadecimal" in r.stderr
    assert f"{len(spans)} spans imported, 1 rejected" in r.stdout
    assert lake_view(tmp_path / "lake") == expected_view(spans)


def not_utf8(req, where: str):
    """``req`` serialized with one span's ``where`` text (or its scope's name) replaced by
    bytes that are not UTF-8, and the ids of the spans that text belongs to. The SDK cannot
    produce this: the bytes are patched after serializing."""
    scope = req.resource_spans[0].scope_spans[0]
    span = scope.spans[1]
    if where == "span name":
        span.name = "QQQQ-marker"
    elif where == "event name":
        span.events.add(name="QQQQ-marker", time_unix_nano=span.start_time_unix_nano)
    elif where == "status message":
        span.status.message = "QQQQ-marker"
    elif where == "attribute value":
        attr = span.attributes.add(key="note")
        attr.value.string_value = "QQQQ-marker"
    else:
        scope.scope.name = "QQQQ-marker"
    body = req.SerializeToString()
    assert body.count(b"QQQQ-marker") == 1
    bad = scope.spans if where == "instrumentation scope name" else [span]
    return body.replace(b"QQQQ-marker", b"\xff\xfeQQ-marker"), {s.span_id.hex() for s in bad}


@pytest.mark.parametrize("where, reason", [("span name", "span name"), ("event name", "event name"),
                                           ("status message", "status message"),
                                           ("attribute value", "attribute key or string value"),
                                           ("instrumentation scope name", "instrumentation scope name or version")])
def test_a_string_that_is_not_utf8_costs_its_span_not_the_whole_record(tmp_path, where, reason):
    # upb refuses a whole message for one such string: every span of the record was lost
    spans = recorded_trials(3)
    body, bad_ids = not_utf8(encode_proto(spans), where)
    later = recorded_trials(1)
    more = encode_proto(later).SerializeToString()  # the records after it are read too
    f = tmp_path / "traces.binpb"
    f.write_bytes(struct.pack(">I", len(body)) + body + struct.pack(">I", len(more)) + more)
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stdout + r.stderr
    n = len(bad_ids)
    assert f"rejected {n}: {reason} is not valid UTF-8" in r.stderr, r.stderr
    assert f"protobuf, {len(spans) - n + len(later)} spans imported, {n} rejected" in r.stdout, r.stdout
    want = {k: v for k, v in expected_view(list(spans) + list(later)).items() if k not in bad_ids}
    assert lake_view(tmp_path / "lake") == want


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08\x00garbage", b"\x00\x00\x10\x00short", b"\x28\xb5\x2f\xfdjunk"])
def test_unreadable_files_exit_4_with_the_reason(tmp_path, content):
    f = tmp_path / "bad.bin"
    f.write_bytes(content)
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4, r.stderr
    assert "error:" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("content", [b'{"data": [{"traceID": "abc", "spans": [{"spanID": "def"}]}]}',
                                     b'{"decision": "deploy"}\n{"decision": "block"}\n'], ids=["jaeger", "jsonl"])
def test_json_that_is_not_otlp_is_an_error_not_zero_spans(tmp_path, content):
    f = tmp_path / "export.json"
    f.write_bytes(content)
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4 and "no OTLP spans" in r.stderr and "resourceSpans" in r.stderr, r.stderr
    # an OTLP export that is merely empty is fine
    f.write_bytes(b'{"resourceSpans": []}')
    assert run_cli("import", f, "--dir", tmp_path / "lake").returncode == 0


def test_missing_file_and_unwritable_lake(tmp_path):
    r = run_cli("import", tmp_path / "nope.jsonl", "--dir", tmp_path / "lake")
    assert r.returncode == 4 and "no such file" in r.stderr
    f = tmp_path / "t.jsonl"
    f.write_bytes(jsonl(recorded_trials(1)))
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    r = run_cli("import", f, "--dir", blocker / "lake")
    assert r.returncode == 4 and "cannot create lake directory" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("head, code, error", [
    (b"\n", 0, None),
    (b"\n\r\n  \n", 0, None),
    (b'{"resourceSpans": [{"reso\n', 4, "line 1: not valid JSON"),  # a record cut off, then the file went on
    (b"\n\n{\"resourceSpans\": [\xff]}\n", 4, "line 3: not UTF-8"),
], ids=["blank", "blanks", "truncated", "blanks-then-bad"])
def test_a_blank_or_bad_first_line_costs_that_line_only(tmp_path, head, code, error):
    spans = recorded_trials(4)
    f = tmp_path / "traces.jsonl"
    f.write_bytes(head + jsonl(spans))
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == code, r.stdout + r.stderr
    assert f"imported {len(spans)} spans" in r.stdout
    assert lake_view(tmp_path / "lake") == expected_view(spans)
    if error:
        assert error in r.stderr and "Traceback" not in r.stderr, r.stderr
    # read to its end, bad line included: recorded, so the same bytes are not imported again
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 0 and "skipped: the same content was imported before" in r.stdout


def test_a_broken_json_document_is_one_error_not_one_per_line(tmp_path):
    f = tmp_path / "doc.json"
    f.write_bytes(json.dumps(otlp_json(recorded_trials(2)), indent=2).encode()[:-200])
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4 and r.stderr.count("error:") == 1 and "not valid JSON" in r.stderr, r.stderr


def _damaged_gzip(data: bytes, damage: str) -> bytes:
    gz = gzip.compress(data)
    if damage == "truncated":
        return gz[: len(gz) * 2 // 3]
    return gz[:-8] + b"\0\0\0\0" + gz[-4:]  # a wrong CRC-32 in the trailer


@pytest.mark.parametrize("damage", ["truncated", "crc"])
def test_a_damaged_gzip_keeps_the_spans_read_before_the_damage(tmp_path, damage):
    spans = recorded_trials(30)
    f = tmp_path / "traces.jsonl.gz"
    f.write_bytes(_damaged_gzip(jsonl(spans), damage))
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert "corrupt or truncated gzip file" in r.stderr and "the spans before the damage were imported" in r.stderr
    got, want = lake_view(tmp_path / "lake"), expected_view(spans)
    if damage == "crc":  # only detected at the end: every span was read
        assert got == want
    else:
        assert 0 < len(got) < len(want) and all(got[k] == want[k] for k in got)
    # the same bytes can never give more: recorded like a file with bad lines
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 0 and "skipped: the same content was imported before" in r.stdout


@pytest.mark.parametrize("fmt", ["jsonl", "document"])
def test_json_with_a_utf8_bom_is_json(tmp_path, fmt):
    spans = recorded_trials(3)
    data = jsonl(spans) if fmt == "jsonl" else json.dumps(otlp_json(spans), indent=2).encode()
    f = tmp_path / f"traces.{fmt}"
    f.write_bytes(b"\xef\xbb\xbf" + data)
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 0 and "json, " in r.stdout, r.stdout + r.stderr
    assert lake_view(tmp_path / "lake") == expected_view(spans)


def test_a_text_file_is_neither_otlp_json_nor_protobuf(tmp_path):
    f = tmp_path / "app.log"
    f.write_bytes(b"2026-01-01 12:00:00 INFO started\n2026-01-01 12:00:01 INFO done\n")
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert "neither OTLP JSON" in r.stderr and "nor length-prefixed OTLP protobuf" in r.stderr, r.stderr


def test_snake_case_otlp_json_is_imported(tmp_path):
    from google.protobuf.json_format import MessageToDict

    spans = recorded_trials(3)
    # proto field names (resource_spans, scope_spans, trace_id, string_value...), base64 ids
    doc = MessageToDict(encode_proto(spans), preserving_proto_field_name=True)
    assert "resource_spans" in doc and "trace_id" in doc["resource_spans"][0]["scope_spans"][0]["spans"][0]
    f = tmp_path / "snake.jsonl"
    f.write_text(json.dumps(doc) + "\n")
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 0 and f"imported {len(spans)} spans" in r.stdout, r.stdout + r.stderr
    assert lake_view(tmp_path / "lake") == expected_view(spans)


def test_reimporting_a_grown_file_says_how_many_spans_are_now_stored_twice(tmp_path):
    spans = recorded_trials(6)
    lake = tmp_path / "lake"
    f = tmp_path / "traces.jsonl"
    f.write_bytes(jsonl(spans[:30]))
    r = run_cli("import", f, "--dir", lake)
    assert r.returncode == 0 and "note:" not in r.stdout
    f.write_bytes(jsonl(spans[:30]) + jsonl(spans[30:]))  # the Collector appended to it
    r = run_cli("import", f, "--dir", lake)
    assert r.returncode == 0, r.stderr
    assert "note: 30 of these spans were already in the lake" in r.stdout, r.stdout
    assert f"otel-assay compact --dir {lake}" in r.stdout
    assert run_cli("compact", "--dir", lake, "--grace-seconds", "0").returncode == 0
    assert lake_view(lake) == expected_view(spans)  # lake_view fails on a duplicate span


@pytest.mark.parametrize("indent", [None, 2])
def test_a_json_array_of_documents_imports_on_one_line_as_when_indented(tmp_path, indent):
    # json.dumps without indent puts the array on one line, which read as JSON Lines and was
    # refused ("must be an object") while the same array indented imported
    from otel_assay.collect.importer import import_files

    spans = recorded_trials(4)
    half = len(spans) // 2
    f = tmp_path / "traces.json"
    f.write_text(json.dumps([otlp_json(spans[:half]), otlp_json(spans[half:])], indent=indent))
    r = import_files([f], tmp_path / "lake")
    assert r.ok, r.files[0].errors
    assert r.spans_imported == len(spans)
    assert lake_view(tmp_path / "lake") == expected_view(spans)


@pytest.mark.parametrize("fmt", ["json", "proto"])
def test_the_collector_file_exporters_zstd_compressed_messages_are_imported(tmp_path, fmt):
    # the Collector's file exporter with `compression: zstd` (its default, message-level
    # mode; collectors/write-files-for-import.yaml calls it fine) compresses each message on
    # its own behind the 4-byte length: every record was refused as corrupt protobuf
    spans = recorded_trials(5)
    out = b""
    for i in range(0, len(spans), 5):
        batch = spans[i:i + 5]
        msg = json.dumps(otlp_json(batch)).encode() if fmt == "json" else encode_proto(batch).SerializeToString()
        z = zstandard.ZstdCompressor().compress(msg)
        out += struct.pack(">I", len(z)) + z
    f = tmp_path / "traces"
    f.write_bytes(out)
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{'json' if fmt == 'json' else 'protobuf'}+zstd, {len(spans)} spans imported" in r.stdout
    assert lake_view(tmp_path / "lake") == expected_view(spans)


@pytest.mark.parametrize("content", [b"2026-01-01 12:00:00 INFO started\n", b"", b'{"decision": "deploy"}\n'],
                         ids=["text", "empty", "not-otlp"])
def test_a_file_nothing_of_which_was_imported_is_not_skipped_as_imported_before(tmp_path, content):
    # it was recorded as imported: the second run said "skipped: the same content was
    # imported before" and exited 0 with none of it in the lake
    f = tmp_path / "export.jsonl"
    f.write_bytes(content)
    first = run_cli("import", f, "--dir", tmp_path / "lake")
    assert first.returncode == 4, first.stdout + first.stderr
    again = run_cli("import", f, "--dir", tmp_path / "lake")
    assert again.returncode == 4 and "skipped" not in again.stdout, again.stdout + again.stderr
    assert again.stderr == first.stderr


def test_a_zstd_file_cut_off_at_a_block_boundary_is_reported_as_truncated(tmp_path):
    # a copy of a file the Collector is still writing ends where it last flushed a block:
    # zstandard's stream reader ends there quietly, so the part imported with exit 0 and the
    # file was recorded as imported whole (gzip reports the same cut)
    spans = recorded_trials(30)
    data = jsonl(spans)
    head = data[:data.index(b"\n", len(data) // 2) + 1]  # whole lines, as a writer flushes them
    buf = io.BytesIO()
    w = zstandard.ZstdCompressor().stream_writer(buf, closefd=False)
    w.write(head)
    w.flush(zstandard.FLUSH_BLOCK)
    f = tmp_path / "traces.jsonl.zst"
    f.write_bytes(buf.getvalue())  # the frame never ends
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "corrupt or truncated zstd file" in r.stderr and "the spans before the damage were imported" in r.stderr
    got, want = lake_view(tmp_path / "lake"), expected_view(spans)
    assert 0 < len(got) < len(want) and all(got[k] == want[k] for k in got)
    # several frames one after another are one stream, as before
    f.write_bytes(zstandard.ZstdCompressor().compress(head) + zstandard.ZstdCompressor().compress(data[len(head):]))
    r = run_cli("import", f, "--dir", tmp_path / "lake2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert lake_view(tmp_path / "lake2") == want


def test_pretty_printed_documents_one_after_another_are_imported(tmp_path):
    # `jq . traces.jsonl > traces.json` spreads each line's document over many lines: neither
    # one document nor JSON Lines, the file was refused whole ("not valid JSON: Extra data")
    spans = recorded_trials(4)
    f = tmp_path / "traces.json"
    f.write_text("".join(json.dumps(otlp_json(spans[i:i + 5]), indent=2) + "\n"
                         for i in range(0, len(spans), 5)))
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"json, {len(spans)} spans imported" in r.stdout
    assert lake_view(tmp_path / "lake") == expected_view(spans)


def test_pretty_printed_documents_cut_off_at_the_end_keep_the_documents_before(tmp_path):
    # a copy of a `jq .` file still being written ends inside its last document: the file
    # was refused whole, losing every complete document before it
    spans = recorded_trials(4)
    docs = [json.dumps(otlp_json(spans[i:i + 5]), indent=2) + "\n" for i in range(0, len(spans), 5)]
    f = tmp_path / "traces.json"
    f.write_text("".join(docs[:-1]) + docs[-1][:len(docs[-1]) // 2])
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stdout + r.stderr
    line = "".join(docs[:-1]).count("\n") + 1
    assert f"error: line {line}: not valid JSON" in r.stderr and "cut off" in r.stderr, r.stderr
    assert f"json, {len(spans) - 5} spans imported" in r.stdout, r.stdout
    assert lake_view(tmp_path / "lake") == expected_view(spans[:-5])
    # a damaged document in the middle costs that document only
    f.write_text("".join(docs[:1]) + docs[1][:len(docs[1]) // 2] + "\n" + "".join(docs[2:]))
    r = run_cli("import", f, "--dir", tmp_path / "lake2")
    assert r.returncode == 4 and "the document there was skipped" in r.stderr, r.stdout + r.stderr
    assert lake_view(tmp_path / "lake2") == expected_view(spans[:5] + spans[10:])


def test_console_span_exporter_output_is_named_and_the_otlp_exporter_suggested(tmp_path):
    # what ConsoleSpanExporter writes to a file: each span's to_json(), one after another
    f = tmp_path / "console.json"
    f.write_text("".join(s.to_json() + "\n" for s in recorded_trials(1)))
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert "ConsoleSpanExporter output" in r.stderr and "opentelemetry-exporter-otlp-json-file" in r.stderr, r.stderr


def test_the_stored_twice_check_reads_the_lake_once_per_run_not_once_per_file(tmp_path, monkeypatch):
    # it ran after each file and read every other file of its partitions again: importing a
    # directory of N small exports cost N² file reads (300 files of 48 spans: 45 s of checks
    # after 5 s of import)
    import otel_assay.collect.importer as importer

    spans = recorded_trials(6)
    lake = tmp_path / "lake"
    (tmp_path / "a.jsonl").write_bytes(jsonl(spans[:10]))
    assert importer.import_files([tmp_path / "a.jsonl"], lake).ok
    for name, part in (("b", spans[10:20]), ("c", spans[5:15]), ("d", spans[20:])):
        (tmp_path / f"{name}.jsonl").write_bytes(jsonl(part))
    connects = []
    real = importer.duckdb_connect
    monkeypatch.setattr(importer, "duckdb_connect", lambda *a, **k: connects.append(1) or real(*a, **k))
    r = importer.import_files([tmp_path / f"{n}.jsonl" for n in "bcd"], lake)
    assert r.ok and len(connects) == 1
    # c holds 5 spans of the lake's a and 5 of b, imported before it in the same run
    assert [f.spans_already_in_lake for f in r.files] == [0, 10, 0]


def test_a_directory_imports_the_span_files_directly_in_it(tmp_path):
    # `import DIR` was refused (exit 3), and so was a glob that matched a directory among files
    spans = recorded_trials(6)
    exports, lake = tmp_path / "exports", tmp_path / "exports" / "lake"
    (exports / "sub").mkdir(parents=True)
    (exports / "traces.jsonl").write_bytes(jsonl(spans[:10]))
    (exports / "traces-2026-01-01T00-00-00.binpb").write_bytes(length_prefixed(spans[10:20]))  # rotated
    (exports / ".traces.jsonl.swp").write_bytes(jsonl(spans[20:25]))
    (exports / "sub" / "more.jsonl").write_bytes(jsonl(spans[25:]))
    (exports / "README.md").write_text("# exports of the agent's spans\n")
    (exports / "rotating.jsonl").write_bytes(b"")
    assert run_cli("import", exports / "sub", "--dir", lake).returncode == 0  # the lake, with Parquet, inside DIR
    r = run_cli("import", exports, "--dir", lake)
    assert r.returncode == 0, r.stdout + r.stderr
    for name, why in ((".traces.jsonl.swp", "hidden"), ("README.md", "neither OTLP JSON"), ("rotating.jsonl", "empty"),
                      ("sub", "a directory"), ("lake", "the lake --dir")):
        assert f"{exports / name}: skipped, {why}" in r.stdout, r.stdout
    assert f"imported 20 spans into {lake}" in r.stdout, r.stdout
    assert lake_view(lake) == expected_view(spans[:20] + spans[25:])
    # a shell glob that matches a directory among files reads that directory's files
    r = run_cli("import", exports / "traces.jsonl", exports / "sub", "--dir", tmp_path / "lake2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert lake_view(tmp_path / "lake2") == expected_view(spans[:10] + spans[25:])
    # the lake's own files are never imported: not the lake, nor a partition of it or of another lake
    partition = next(lake.glob("spans/dt=*"))
    for target in (lake, partition):
        r = run_cli("import", target, "--dir", lake)
        assert r.returncode == 4 and "it is the lake --dir (or inside it)" in r.stdout, r.stdout + r.stderr
        assert "no files to import" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("import", partition, "--dir", tmp_path / "lake3")
    assert r.returncode == 4 and "skipped, a Parquet file" in r.stdout, r.stdout + r.stderr
    # an empty directory: nothing was skipped, so the message says so instead of "see above"
    (tmp_path / "empty").mkdir()
    r = run_cli("import", tmp_path / "empty", "--dir", tmp_path / "lake4")
    assert r.returncode == 4 and "the directories named are empty" in r.stderr, r.stdout + r.stderr
    assert lake_view(lake) == expected_view(spans[:20] + spans[25:])


def _zstd_of(parts, repeat: int) -> bytes:
    """zstd of ``parts[0] + parts[1] * repeat``, compressed in a stream (never all in memory)."""
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(level=19).stream_writer(buf, closefd=False) as w:
        w.write(parts[0])
        for _ in range(repeat):
            w.write(parts[1])
    return buf.getvalue()


def _bounded_import(*args):
    """The real CLI under a 3 GiB address-space limit (the bomb reached 2.6 GB RSS and a
    MemoryError traceback); returns the result and the child's peak RSS in bytes."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    r = subprocess.run([sys.executable, "-m", "otel_assay", "import", *map(str, args)], capture_output=True, text=True,
                       timeout=300, preexec_fn=limit)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return r, max(peak, before) * 1024


def test_a_small_zstd_that_expands_to_gigabytes_is_refused_in_bounded_memory(tmp_path):
    # one JSON "line" of 4 GiB: a few hundred KiB compressed
    bomb = tmp_path / "bomb.jsonl.zst"
    bomb.write_bytes(_zstd_of((b"[", b" " * (1 << 20)), 4 << 10))
    assert bomb.stat().st_size < 1 << 20
    r, peak = _bounded_import(bomb, "--dir", tmp_path / "lake")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr
    assert "longer than 256 MiB" in r.stderr, r.stderr
    assert peak < 1 << 30, peak


def test_the_decompressed_size_limit_stops_a_file_and_a_higher_limit_imports_the_rest(tmp_path):
    spans = recorded_trials(400)
    data = jsonl(spans, per_line=1)
    f = tmp_path / "traces.jsonl.gz"
    f.write_bytes(gzip.compress(data))
    assert len(data) > 1 << 20
    r = run_cli("import", f, "--dir", tmp_path / "lake", "--max-decompressed-mib", "1")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "decompresses to more than 1 MiB" in r.stderr and "--max-decompressed-mib" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    got = lake_view(tmp_path / "lake")
    assert 0 < len(got) < len(spans)
    # not recorded as imported: with a higher limit the rest comes in
    r = run_cli("import", f, "--dir", tmp_path / "lake", "--max-decompressed-mib", "64")
    assert r.returncode == 0, r.stdout + r.stderr
    assert lake_view(tmp_path / "lake") == expected_view(spans)
    r = run_cli("import", f, "--dir", tmp_path / "lake", "--max-decompressed-mib", "0")
    assert r.returncode == 3, r.stderr


@pytest.mark.parametrize("unit", [b"\0", b"\0\0\0\x02\x0a\x00"])
def test_a_file_of_empty_records_is_an_error_read_in_seconds(tmp_path, unit):
    """64 MiB of zero bytes read as 16 million empty protobuf messages: 27 s and exit 0 with
    0 spans; a GiB took minutes. Tiny messages without spans likewise."""
    import time

    f = tmp_path / "zeros.binpb.zst"
    f.write_bytes(_zstd_of((b"", unit * ((64 << 20) // len(unit))), 1))
    t0 = time.monotonic()
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert time.monotonic() - t0 < 20


def _rows(lake) -> int:
    return sum(pq.read_metadata(f).num_rows for f in Lake(lake).live_files("spans"))


@pytest.mark.parametrize("fmt", ["jsonl", "binpb", "binpb.zst"])
def test_the_span_limit_stops_a_file_and_a_higher_limit_imports_the_rest(tmp_path, fmt):
    spans = recorded_trials(10)
    data = jsonl(spans) if fmt == "jsonl" else length_prefixed(spans)  # 5 spans a record
    f = tmp_path / f"traces.{fmt}"
    f.write_bytes(zstandard.ZstdCompressor().compress(data) if fmt.endswith(".zst") else data)
    lake = tmp_path / "lake"
    r = run_cli("import", f, "--dir", lake, "--max-spans", "12")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("  error:")]
    assert errors == ["  error: the file holds more than 12 spans; the spans before that were imported: if the file "
                      "is genuine, import it again with a higher --max-spans"], r.stderr
    # read record by record: the one that passed the limit is imported with those before it
    assert lake_view(lake) == expected_view(spans[:15]) and _rows(lake) == 15
    # not recorded as imported: with a higher limit the rest comes in, each span once
    r = run_cli("import", f, "--dir", lake, "--max-spans", str(len(spans)))  # exactly as many as it holds
    assert r.returncode == 0, r.stdout + r.stderr
    assert lake_view(lake) == expected_view(spans) and _rows(lake) == len(spans)
    assert run_cli("import", f, "--dir", lake, "--max-spans", "0").returncode == 3


@pytest.mark.parametrize("compression", ["", "gz", "zst"])
def test_a_bare_export_request_is_imported_and_named(tmp_path, compression):
    # one ExportTraceServiceRequest with no length before it, as opentelemetry-proto's
    # examples/trace.protobuf-bin ships it and as `curl --data-binary` posts it: it was
    # refused as a "truncated record at end of file"
    spans = recorded_trials(3)
    data = encode_proto(spans).SerializeToString()
    data = {"": data, "gz": gzip.compress(data), "zst": zstandard.ZstdCompressor().compress(data)}[compression]
    f = tmp_path / "trace.protobuf-bin"
    f.write_bytes(data)
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 0, r.stderr
    suffix = f"+{'gzip' if compression == 'gz' else 'zstd'}" if compression else ""
    assert f"protobuf (one bare message, no length prefix){suffix}, {len(spans)} spans imported" in r.stdout, r.stdout
    assert lake_view(tmp_path / "lake") == expected_view(spans)
    # and a directory holding it lists it as a span export
    r = run_cli("import", tmp_path, "--dir", tmp_path / "lake2")
    assert r.returncode == 0 and f"imported {len(spans)} spans" in r.stdout, r.stdout + r.stderr


def test_a_bare_request_whose_first_bytes_read_as_json_is_protobuf(tmp_path):
    # a message starts with 0x0a (a newline to JSON), then the first resource's length: 123
    # is "{", and the file read as a JSON document that was not valid
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="step", start_time_unix_nano=1_700_000_000 * 10**9,
                end_time_unix_nano=1_700_000_001 * 10**9)
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])
    rs.schema_url = "x" * (123 - len(rs.SerializeToString()) - 2)  # field 3: tag, one-byte length, the text
    data = ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()
    assert data[:2] == b"\x0a{" and len(rs.SerializeToString()) == 123
    f = tmp_path / "trace.bin"
    f.write_bytes(data)
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 0 and "protobuf (one bare message, no length prefix), 1 spans imported" in r.stdout, \
        r.stdout + r.stderr
    # and JSON that starts with a newline and "{" stays JSON, indented or not, short or long
    spans = recorded_trials(2)
    for indent in (2, "\t", None):
        f.write_bytes(b"\n" + json.dumps(otlp_json(spans), indent=indent).encode())
        r = run_cli("import", f, "--dir", tmp_path / f"lake-{indent!r}")
        assert r.returncode == 0 and f"json, {len(spans)} spans imported" in r.stdout, r.stdout + r.stderr
    f.write_bytes(b'\n{\n  "resourceSpans": []}')
    r = run_cli("import", f, "--dir", tmp_path / "lake-empty")
    assert r.returncode == 0 and "json, 0 spans imported" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("cut", [1, 7])
def test_a_damaged_bare_request_is_a_clear_error(tmp_path, cut):
    data = encode_proto(recorded_trials(2)).SerializeToString()
    f = tmp_path / "trace.bin"
    f.write_bytes(data[:-cut])
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert "nor a bare ExportTraceServiceRequest" in r.stderr and "truncated record" not in r.stderr, r.stderr
