"""A large JSON Lines file is read as byte ranges of whole lines, by one process in order or
by a pool (`import --jobs N`): the same lake files, byte for byte, the same reports (line
numbers included) and ledger either way, and the rows of a read of the whole file."""

from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
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


def _lake_bytes(lake) -> dict[str, bytes]:
    return {str(p.relative_to(lake)): p.read_bytes() for p in sorted(lake.rglob("*.parquet"))}


def _serial_and_ranged(tmp_path, f, **kw):
    """One process and a pool of two: the same reports, lake files and ledger."""
    serial = import_files([f], tmp_path / "serial", **kw)
    ranged = import_files([f], tmp_path / "ranged", jobs=2, **kw)
    assert _lake_bytes(tmp_path / "ranged") == _lake_bytes(tmp_path / "serial")
    ledger = [sorted(p.name for p in (tmp_path / lake / "_imports").glob("*.json")) if (tmp_path / lake).exists()
              else [] for lake in ("serial", "ranged")]
    assert ledger[0] == ledger[1]
    return serial, ranged


def _whole(tmp_path, f):
    """The file read whole, as any file too small for ranges is: the rows must be these."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(importer, "RANGE_BYTES", 1 << 40)
        return import_files([f], tmp_path / "whole")


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
    plan = importer._line_ranges(f)
    assert plan is not None and len(plan.ranges) >= 4, "the file must be read in several ranges"
    serial, ranged = _serial_and_ranged(tmp_path, f)
    (a,), (b,) = _whole(tmp_path, f).files, ranged.files
    # line 1 holds the BOM, lines 2 and 3 are blank: lines[i] is line i + 3
    assert a.errors[0].startswith("line 6: not valid JSON") and a.errors[1:] == ["line 33: not UTF-8"], a.errors
    assert b.errors == a.errors
    assert a == b and serial.files == ranged.files
    assert _rows(tmp_path / "ranged") == _rows(tmp_path / "whole")
    assert len(_rows(tmp_path / "ranged")["spans"]) == b.spans_imported == len(spans) - 6  # three lines of two spans replaced
    # one file per range at least: the ranges were written by the tasks, not by one reader
    assert len(Lake(tmp_path / "ranged").live_files("spans")) >= len(plan.ranges)


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
    # an import that ended before its record (interrupted) is run again, with any --jobs:
    # the ranges' files are named after the file and the range, so they are replaced, not
    # stored twice
    for jobs in (2, 1):
        for p in (tmp_path / "lake" / "_imports").glob("*.json"):
            p.unlink()
        again = import_files([f], tmp_path / "lake", jobs=jobs)
        assert again.files[0].spans_already_in_lake == 0
        assert sorted(Lake(tmp_path / "lake").live_files("spans")) == files
    assert lake_view(tmp_path / "lake") == expected_view(spans)


def test_the_span_limit_holds_for_the_file_not_for_each_range(tmp_path, small_ranges):
    spans = recorded_trials(10)
    f = tmp_path / "big.jsonl"
    f.write_bytes(b"".join(_lines(spans)))
    limit = len(spans) // 2
    (serial,) = import_files([f], tmp_path / "serial", max_spans=limit).files
    assert serial.stopped_at_limit and limit < serial.spans_imported <= limit + 2  # to the line that passed it
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
    cases = {
        "lines.jsonl": (data, True),
        "lines.jsonl.gz": (gzip.compress(data), False),  # a compressed stream cannot be entered midway
        "document.json": (json.dumps(json.loads(data.splitlines()[0]), indent=2).encode() * 20, False),
        "short.jsonl": (data[:3000], False),  # less than two ranges
        "first-line-bad.jsonl": (b"{\n" + data, False),  # read whole, as one document or not
    }
    for name, (content, ranged) in cases.items():
        (tmp_path / name).write_bytes(content)
        assert (importer._line_ranges(tmp_path / name) is not None) is ranged, name
    for name in cases:  # and each imports as one process imports it
        serial, ranged = _serial_and_ranged(tmp_path / name.replace(".", "_"), tmp_path / name)
        assert serial.files == ranged.files, name


def test_a_range_whose_process_died_leaves_the_file_unrecorded():
    part = importer._Part(FileReport("f.jsonl", format="json", spans_seen=3, spans_imported=3), [], set(), True)
    report = FileReport("f.jsonl", format="json")
    files, complete = importer._join(report, [part, workers.Lost()], 100)
    assert report.spans_imported == 3 and not complete
    assert report.errors == ["part of the file was not imported: the process reading it ended abruptly (killed, "
                             "perhaps out of memory; try fewer --jobs); import it again"]


def test_a_file_that_changed_since_it_was_cut_is_not_recorded(tmp_path, small_ranges):
    # the Collector rotates its file (renames it, starts a new one) or appends to it while it
    # is imported: a range read from what the path holds then is not of the hashed content
    spans = recorded_trials(8)
    f = tmp_path / "big.jsonl"
    f.write_bytes(b"".join(_lines(spans)))
    plan = importer._line_ranges(f)
    with open(f, "ab") as out:
        out.write(_lines(spans)[0])
    part = importer._import_range(f, plan, plan.ranges[1], Lake(tmp_path / "lake"), importer.DEFAULT_LIMITS,
                                  10**9, None, lambda n: n)
    assert not part.complete and part.report.spans_imported == 0
    assert part.report.errors == ["the file changed while it was imported (rotated, appended to or replaced); "
                                  "import it again once it is complete"]


def test_a_range_the_lake_could_not_take_leaves_the_file_unrecorded(tmp_path, small_ranges, monkeypatch):
    spans = recorded_trials(8)
    f = tmp_path / "big.jsonl"
    f.write_bytes(b"".join(_lines(spans)))
    plan = importer._line_ranges(f)
    failing = plan.ranges[2].start
    write = Lake.write

    def full_at_one_range(self, tables, *, token=None, fsync=True):
        if token and f"-at{failing}-" in token:
            raise OSError(28, "No space left on device")
        return write(self, tables, token=token, fsync=fsync)

    monkeypatch.setattr(Lake, "write", full_at_one_range)
    (report,) = import_files([f], tmp_path / "lake").files
    assert report.errors == ["cannot write the lake: No space left on device; free space or fix its permissions "
                             "and import again (nothing of this file was recorded as imported)"]
    assert 0 < report.spans_imported < len(spans)
    assert not list((tmp_path / "lake" / "_imports").glob("*.json"))
    monkeypatch.setattr(Lake, "write", write)  # space again: the rest imports, nothing twice
    (again,) = import_files([f], tmp_path / "lake").files
    assert not again.errors and again.spans_imported == len(spans)
    assert again.spans_already_in_lake == 0  # the ranges read before rewrote their own files
    assert lake_view(tmp_path / "lake") == expected_view(spans)


def test_line_errors_stop_at_100_for_the_file_as_for_one_reader(tmp_path, small_ranges):
    spans = recorded_trials(4)
    lines = _lines(spans) + [b"{bad\n"] * 300 + _lines(spans)[:1]
    f = tmp_path / "big.jsonl"
    f.write_bytes(b"".join(lines))
    assert len(importer._line_ranges(f).ranges) > 3
    serial, ranged = _serial_and_ranged(tmp_path, f)
    (whole,) = _whole(tmp_path, f).files
    assert len(whole.errors) == 100 and serial.files[0].errors == whole.errors == ranged.files[0].errors


def test_a_file_with_a_line_longer_than_a_record_is_read_whole(tmp_path, small_ranges, monkeypatch):
    monkeypatch.setattr(importer, "MAX_RECORD", 5000)
    spans = recorded_trials(8)
    lines = _lines(spans, per_line=1)
    lines.insert(len(lines) // 2, b'{"resourceSpans": [], "x": "' + b"y" * 6000 + b'"}\n')
    f = tmp_path / "big.jsonl"
    f.write_bytes(b"".join(lines))
    assert importer._line_ranges(f) is None
    (report,) = import_files([f], tmp_path / "lake").files
    assert any("is longer than" in e and "the rest of the file was not read" in e for e in report.errors)


_LINE = st.sampled_from(["good", "good", "good", "blank", "bad", "foreign", "list", "crlf"])


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
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
        mp.setattr(importer, "RANGE_BYTES", range_bytes)
        plan = importer._line_ranges(f)
        event("read whole" if plan is None else "read in ranges")
        ranged = import_files([f], tmp_path / "ranged")  # range by range in this process: the pool's
        # own equality with it is shown above; here the cut itself is what varies
        whole = _whole(tmp_path, f)
    assert whole.files == ranged.files
    assert _rows(tmp_path / "ranged") == _rows(tmp_path / "whole")
