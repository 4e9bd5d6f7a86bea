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
