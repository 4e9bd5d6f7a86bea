"""`import --jobs N` of one large JSON Lines file, read as byte ranges of whole lines by a
pool of processes: the same rows, reports (line numbers included) and ledger as one process
reading the file from its start."""

from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_assay.collect import importer, workers
from otel_assay.collect.importer import FileReport, import_files
from otel_assay.lake.files import Lake

from .conftest import expected_view, lake_view, recorded_trials
from .test_import import jsonl

TABLES = ("spans", "span_events", "span_links")


def _rows(lake) -> dict[str, list]:
    """Every row of each table, sorted: the lake's content whatever files hold it."""
    out = {}
    for table in TABLES:
        rows = []
        for f in Lake(lake).live_files(table):
            rows += [tuple(sorted((k, repr(v)) for k, v in r.items())) for r in pq.read_table(f).to_pylist()]
        out[table] = sorted(rows)
    return out


@pytest.fixture
def small_ranges(monkeypatch):
    """Ranges of a few KiB, so that a test file of a few hundred lines is read in many."""
    monkeypatch.setattr(importer, "BYTES_PER_WORKER", 1)
    monkeypatch.setattr(importer, "RANGE_BYTES", 2048)


def _lines(spans, per_line=2) -> list[bytes]:
    return jsonl(spans, per_line=per_line).splitlines(keepends=True)


def _serial_and_ranged(tmp_path, f, **kw):
    serial = import_files([f], tmp_path / "serial", **kw)
    ranged = import_files([f], tmp_path / "ranged", jobs=2, **kw)
    return serial, ranged


def test_a_file_read_in_ranges_gives_the_rows_and_report_one_process_gives(tmp_path, small_ranges):
    spans = recorded_trials(12)
    lines = _lines(spans)
    # damage in several ranges: the errors name the same lines as a read from the start
    lines[3] = b"{not json\n"
    lines[17] = b"\n"
    lines[25] = b'{"something": "else"}\r\n'
    lines[30:30] = [b"\xff\xfe\n", b"   \n"]
    assert len(lines) > 35
    f = tmp_path / "big.jsonl"
    f.write_bytes(b"\xef\xbb\xbf\n\n" + b"".join(lines))
    ranges = importer._line_ranges(f, Lake(tmp_path / "ranged"))
    assert ranges is not None and len(ranges[1]) >= 4, "the file must be read in several ranges"
    serial, ranged = _serial_and_ranged(tmp_path, f)
    (a,), (b,) = serial.files, ranged.files
    # line 1 holds the BOM, lines 2 and 3 are blank: lines[i] is line i + 3
    assert a.errors[0].startswith("line 6: not valid JSON") and a.errors[1:] == ["line 33: not UTF-8"], a.errors
    assert b.errors == a.errors
    assert a == b
    assert _rows(tmp_path / "ranged") == _rows(tmp_path / "serial")
    assert len(_rows(tmp_path / "ranged")["spans"]) == b.spans_imported == len(spans) - 6  # three lines of two spans replaced
    # one file per range at least: the ranges were written by the tasks, not by one reader
    assert len(Lake(tmp_path / "ranged").live_files("spans")) >= len(ranges[1])


def test_a_file_read_in_ranges_is_recorded_and_skipped_the_next_time(tmp_path, small_ranges):
    spans = recorded_trials(8)
    f = tmp_path / "big.jsonl"
    f.write_bytes(b"".join(_lines(spans)))
    first = import_files([f], tmp_path / "lake", jobs=2)
    assert first.ok and first.spans_imported == len(spans)
    files = sorted(Lake(tmp_path / "lake").live_files("spans"))
    for jobs in (1, 2):
        again = import_files([f], tmp_path / "lake", jobs=jobs)
        assert again.files[0].already_imported and again.spans_imported == 0
    # an import that ended before its record (interrupted) is run again: the ranges' files
    # are named after the file and the range, so they are replaced, not stored twice
    for p in (tmp_path / "lake" / "_imports").glob("*.json"):
        p.unlink()
    import_files([f], tmp_path / "lake", jobs=2)
    assert sorted(Lake(tmp_path / "lake").live_files("spans")) == files
    assert lake_view(tmp_path / "lake") == expected_view(spans)


def test_the_span_limit_holds_for_the_file_not_for_each_range(tmp_path, small_ranges):
    spans = recorded_trials(10)
    f = tmp_path / "big.jsonl"
    f.write_bytes(b"".join(_lines(spans)))
    limit = len(spans) // 2
    (report,) = import_files([f], tmp_path / "lake", jobs=2, max_spans=limit).files
    # the ranges count the file's spans together: each of the two workers may finish the
    # line (two spans) it was reading when the other passed the limit
    assert report.stopped_at_limit and limit < report.spans_imported <= limit + 2 * 2, report
    assert report.errors == [f"the file holds more than {limit} spans; the spans before that were imported: if "
                             "the file is genuine, import it again with a higher --max-spans"]
    assert not list((tmp_path / "lake" / "_imports").glob("*.json"))  # not recorded: a higher limit reads the rest


def test_only_uncompressed_json_lines_is_read_in_ranges(tmp_path, small_ranges):
    spans = recorded_trials(8)
    data = b"".join(_lines(spans))
    lake = Lake(tmp_path / "lake")
    cases = {
        "lines.jsonl": (data, True),
        "lines.jsonl.gz": (gzip.compress(data), False),  # a compressed stream cannot be entered midway
        "document.json": (json.dumps(json.loads(data.splitlines()[0]), indent=2).encode() * 20, False),
        "short.jsonl": (data[:3000], False),  # less than two ranges
        "first-line-bad.jsonl": (b"{\n" + data, False),  # read whole, as one document or not
    }
    for name, (content, ranged) in cases.items():
        (tmp_path / name).write_bytes(content)
        assert (importer._line_ranges(tmp_path / name, lake) is not None) is ranged, name
    for name in cases:  # and each imports as one process imports it
        serial, ranged = _serial_and_ranged(tmp_path / name.replace(".", "_"), tmp_path / name)
        assert serial.files == ranged.files, name


def test_a_range_whose_process_died_leaves_the_file_unrecorded(tmp_path):
    part = FileReport("f.jsonl", format="json", spans_seen=3, spans_imported=3)
    tasks = [("range", "f.jsonl", "abc", 0, 10, 1, 0), ("range", "f.jsonl", "abc", 10, 20, 4, 0)]
    lake = Lake(tmp_path / "lake")
    report, files = importer._joined(tmp_path / "f.jsonl", tasks, [(part, [], set()), workers.Lost()], lake, 100)
    assert report.spans_imported == 3 and len(report.errors) == 1 and "ended abruptly" in report.errors[0]
    assert not (tmp_path / "lake" / "_imports").exists()


_LINE = st.sampled_from(["good", "good", "good", "blank", "bad", "foreign", "list", "crlf"])


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(kinds=st.lists(_LINE, min_size=30, max_size=120), range_bytes=st.integers(300, 4000),
       bom=st.booleans(), trailing_newline=st.booleans())
def test_any_cut_into_ranges_reads_as_one_process_reads(tmp_path_factory, kinds, range_bytes, bom, trailing_newline):
    tmp_path = tmp_path_factory.mktemp("ranges")
    good = iter(_lines(recorded_trials(len(kinds) // 2 + 1), per_line=1))
    out = []
    for kind in kinds:
        if kind in ("good", "crlf", "list"):
            line = next(good, b'{"resourceSpans": []}\n')
            if kind == "crlf":
                line = line.rstrip(b"\n") + b"\r\n"
            elif kind == "list":
                line = b"[" + line.rstrip(b"\n") + b"]\n"
        else:
            line = {"blank": b"\n", "bad": b'{"resourceSpans": [\n', "foreign": b'{"a": 1}\n'}[kind]
        out.append(line)
    data = b"".join(out)
    if not trailing_newline:
        data = data.rstrip(b"\n")
    f = tmp_path / "t.jsonl"
    f.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(importer, "BYTES_PER_WORKER", 1)
        mp.setattr(importer, "RANGE_BYTES", range_bytes)
        serial, ranged = _serial_and_ranged(tmp_path, f)
    assert serial.files == ranged.files
    assert _rows(tmp_path / "ranged") == _rows(tmp_path / "serial")
