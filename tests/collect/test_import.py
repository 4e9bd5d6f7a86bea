"""`otel-assay import` on files written with the SDK's own OTLP encoders, through the real CLI."""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import zstandard
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto

from otel_assay.collect.lake import Lake

from .conftest import expected_view, lake_view, recorded_trials


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "otel_assay", *map(str, args)], capture_output=True, text=True, timeout=120)


def jsonl(spans, per_line=5) -> bytes:
    lines = [json.dumps(encode_json(spans[i:i + per_line]).to_dict()) for i in range(0, len(spans), per_line)]
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
        data = json.dumps(encode_json(spans).to_dict(), indent=2).encode()
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
    bad_span = encode_json(spans[:1]).to_dict()
    bad_span["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "nothex!!nothex!!"
    f = tmp_path / "mixed.jsonl"
    f.write_bytes(good + b"\n{not json\n\xff\xfe\n" + json.dumps(bad_span).encode() + b"\n")
    r = run_cli("import", f, "--dir", tmp_path / "lake")
    assert r.returncode == 4
    assert "line 2: not valid JSON" in r.stderr and "line 3: not UTF-8" in r.stderr
    assert "span_id is not hexadecimal" in r.stderr
    assert f"{len(spans)} spans imported, 1 rejected" in r.stdout
    assert lake_view(tmp_path / "lake") == expected_view(spans)


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
    f.write_bytes(json.dumps(encode_json(recorded_trials(2)).to_dict(), indent=2).encode()[:-200])
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
    data = jsonl(spans) if fmt == "jsonl" else json.dumps(encode_json(spans).to_dict(), indent=2).encode()
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
    f.write_text(json.dumps([encode_json(spans[:half]).to_dict(), encode_json(spans[half:]).to_dict()], indent=indent))
    r = import_files([f], tmp_path / "lake")
    assert r.ok, r.files[0].errors
    assert r.spans_imported == len(spans)
    assert lake_view(tmp_path / "lake") == expected_view(spans)
