"""The OTLP/JSON fast path (msgspec) against the simple path (json.loads + add_json), and
`import` with its fast paths against `import` with OTEL_ASSAY_PURE_PYTHON=1: the same rows,
byte for byte, the same reports, on hypothesis-generated OTLP JSON (hostile values included)
and on every recorded fixture."""

from __future__ import annotations

import base64
import json
import math
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from otel_assay import semconv
from otel_assay.collect import fastjson, otlp
from otel_assay.collect.importer import import_files
from otel_assay.lake.rows import SpanBatch
from otel_assay.lake.schema import Limits

FIXTURES = sorted((Path(__file__).parent.parent / "fixtures" / "otlp").glob("*.json"))
SMALL = Limits(max_attributes=4, max_value_chars=24, max_key_chars=12, max_events=2, max_links=2)
T0 = 1_780_000_000_000_000_000

# ---------------------------------------------------------------------------- strategies
_keys = st.sampled_from([k for _c, k, _t in semconv.PROMOTED_SPAN_ATTRIBUTES] +
                        ["k", "a.b", "service.name", "x" * 13, "ü", "日本", ""])
_texts = st.text(max_size=30) | st.sampled_from(["", "x" * 25, "ü" * 30, "\u2028", "\x00"])
_huge = st.integers(min_value=-(2**70), max_value=2**70) | st.sampled_from([2**63, -(2**63) - 1, 2**63 - 1, 10**400])


def _hostile(valid: st.SearchStrategy, *bad: st.SearchStrategy) -> st.SearchStrategy:
    """``valid`` mostly, now and then one of the hostile alternatives."""
    return st.one_of(valid, valid, valid, *bad) if bad else valid


def _any_values(plain: bool) -> st.SearchStrategy:
    scalars = st.one_of(
        st.builds(lambda s: {"stringValue": s}, _texts),
        st.builds(lambda i: {"intValue": i}, st.integers(-(2**63), 2**63 - 1)),
        st.builds(lambda i: {"intValue": str(i)}, st.integers(-(2**63), 2**63 - 1)),
        st.builds(lambda b: {"boolValue": b}, st.booleans()),
        st.builds(lambda d: {"doubleValue": d}, st.floats(allow_nan=False, allow_infinity=False)),
        st.builds(lambda b: {"bytesValue": base64.b64encode(b).decode()}, st.binary(max_size=8)),
        st.just({}),
    )
    if not plain:
        scalars = scalars | st.one_of(
            st.builds(lambda i: {"intValue": i}, _huge | st.floats() | st.text(max_size=5)),
            st.sampled_from([{"doubleValue": "NaN"}, {"doubleValue": "Infinity"}, {"doubleValue": 10**400},
                             {"boolValue": "true"}, {"boolValue": "maybe"}, {"boolValue": 1},
                             {"stringValue": None}, {"stringValue": 5}, {"bytesValue": "!!"},
                             {"bytesValue": "ü"}, {"stringValue": "a", "intValue": 1}, {"other": 1}, [], None, 7]),
            st.builds(lambda d: {"doubleValue": d}, st.floats() | _huge),
        )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.builds(lambda vs: {"arrayValue": {"values": vs}}, st.lists(inner, max_size=3)),
            st.builds(lambda kvs: {"kvlistValue": {"values": [{"key": k, "value": v} for k, v in kvs]}},
                      st.lists(st.tuples(_keys, inner), max_size=3)),
        ),
        max_leaves=6,
    )


def _attributes(plain: bool) -> st.SearchStrategy:
    kv = st.builds(lambda k, v: {"key": k, "value": v}, _keys, _any_values(plain))
    if plain:
        return st.lists(kv, max_size=6, unique_by=lambda a: a["key"])
    odd = st.sampled_from([{"key": "k"}, {"value": {"stringValue": "v"}}, {"key": None, "value": {"intValue": 1}},
                           {"key": 5, "value": {}}, "kv"])
    return _hostile(st.lists(kv, max_size=6), st.lists(kv | odd, max_size=4), st.just("not a list"), st.none())


def _hex(n: int) -> st.SearchStrategy:
    return st.binary(min_size=n, max_size=n).map(bytes.hex)


def _ids(n: int, plain: bool) -> st.SearchStrategy:
    valid = _hex(n).filter(lambda h: h.strip("0"))
    if plain:
        return valid | valid.map(str.upper) | st.binary(min_size=n, max_size=n).filter(any).map(
            lambda b: base64.b64encode(b).decode())
    return _hostile(valid, st.sampled_from(["", "0" * 2 * n, "zz" * n, "ab" * (n - 1), "+" + "a" * (2 * n - 1),
                                            " " + "a" * (2 * n - 1), "٣" * 2 * n, None, 12]),
                    st.text(max_size=2 * n + 2))


def _times(plain: bool) -> st.SearchStrategy:
    valid = st.integers(T0, T0 + 10**12)
    if plain:
        return valid | valid.map(str)
    return _hostile(valid | valid.map(str), _huge, _huge.map(str),
                    st.sampled_from(["soon", " 1", "1_000", None, 1.5, float(T0), True, [], 0, -1]))


def _enum(names: list[str], top: int, plain: bool) -> st.SearchStrategy:
    valid = st.integers(0, top) | st.sampled_from(names) | st.integers(0, top).map(str) | st.none()
    if plain:
        return valid
    return _hostile(valid, st.sampled_from(["BOGUS", top + 1, -1, True, 2.0, "2.0", [], {}]), _huge)


def _counts(plain: bool) -> st.SearchStrategy:
    valid = st.integers(0, 5)
    return valid if plain else _hostile(valid, _huge, st.sampled_from(["3", None, 1.0, True]))


def _maybe(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | strategy  # None: the field is left out


@st.composite
def _span(draw, plain: bool, trace_id: str | None = None) -> dict:
    if plain:
        start = draw(st.integers(T0, T0 + 10**12))
        end = start + draw(st.integers(0, 10**9))
        start, end = (str(start), str(end)) if draw(st.booleans()) else (start, end)
    else:
        start, end = draw(_times(plain)), draw(_times(plain))
    fields = {
        "traceId": trace_id if trace_id and draw(st.booleans()) else draw(_ids(16, plain)),
        "spanId": draw(_ids(8, plain)),
        "parentSpanId": draw(_maybe(_ids(8, plain) | st.just(""))),
        "traceState": draw(_maybe(_texts if plain else _hostile(_texts, st.just(7)))),
        "name": draw(_maybe(_texts if plain else _hostile(_texts, st.sampled_from([5, None, ["x"]])))),
        "kind": draw(_maybe(_enum(list(otlp._KIND_NAMES), 5, plain))),
        "startTimeUnixNano": start,
        "endTimeUnixNano": end,
        "attributes": draw(_attributes(plain)),
        "droppedAttributesCount": draw(_maybe(_counts(plain))),
        "droppedEventsCount": draw(_maybe(_counts(plain))),
        "droppedLinksCount": draw(_maybe(_counts(plain))),
        "status": draw(_maybe(st.fixed_dictionaries({}, optional={
            "code": _enum(list(otlp._STATUS_NAMES), 2, plain),
            "message": _texts if plain else _hostile(_texts, st.just(5))}))),
        "events": draw(_maybe(st.lists(st.fixed_dictionaries({"timeUnixNano": _times(plain)}, optional={
            "name": _texts, "attributes": _attributes(plain), "droppedAttributesCount": _counts(plain)}), max_size=3))),
        "links": draw(_maybe(st.lists(st.fixed_dictionaries(
            {"traceId": _ids(16, plain), "spanId": _ids(8, plain)},
            optional={"traceState": _texts, "attributes": _attributes(plain),
                      "droppedAttributesCount": _counts(plain), "flags": st.just(256)}), max_size=3))),
        "flags": draw(_maybe(st.just(769))),
    }
    span = {k: v for k, v in fields.items() if v is not None or (not plain and draw(st.booleans()))}
    if not plain and draw(st.integers(0, 9)) == 0:  # snake_case names, or a field OTLP does not have
        span = {("trace_id" if k == "traceId" else k): v for k, v in span.items()} if draw(st.booleans()) \
            else {**span, "unknownField": 1}
    if not plain and draw(st.integers(0, 19)) == 0:
        return draw(st.sampled_from([[], "span", 5]))
    return span


@st.composite
def _documents(draw, plain: bool) -> dict:
    trace_id = draw(_hex(16).filter(lambda h: h.strip("0")))
    resource_spans = []
    for _ in range(draw(st.integers(0, 2))):
        scope_spans = [{"scope": draw(_maybe(st.fixed_dictionaries({}, optional={
                            "name": _texts if plain else _hostile(_texts, st.just(5)), "version": _texts}))),
                        "spans": draw(st.lists(_span(plain, trace_id), max_size=4))}
                       for _ in range(draw(st.integers(0, 2)))]
        rs = {"resource": {"attributes": draw(_attributes(plain))}, "scopeSpans": scope_spans}
        resource_spans.append({k: v for k, v in rs.items() if v is not None})
    doc = {"resourceSpans": resource_spans}
    if not plain and draw(st.integers(0, 9)) == 0:
        doc = draw(st.sampled_from([{"resource_spans": resource_spans}, {"resourceSpans": None}, {},
                                    {"resourceSpans": "x"}, [doc, doc], {"data": []}]))
    return doc


def _encoded(draw_doc, ensure_ascii: bool) -> bytes:
    return json.dumps(draw_doc, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")


# ---------------------------------------------------------------------------- the batch: fast == simple
def _simple(body: bytes, limits: Limits) -> tuple[SpanBatch, int | str]:
    batch = SpanBatch(limits)
    try:
        return batch, otlp.add_json(json.loads(body), batch)
    except Exception as e:  # the simple path's refusal, compared by kind
        return batch, type(e).__name__


def _same_rows(body: bytes, limits: Limits) -> bool:
    """Whether the fast path read ``body``; when it did, its rows are the simple path's."""
    fast = SpanBatch(limits)
    seen = fastjson.add_json_record(body, fast)
    if seen is None:
        assert len(fast) == 0 and fast.rejected == 0  # declined: nothing appended
        return False
    simple, simple_seen = _simple(body, limits)
    assert simple_seen == seen and simple.rejected == 0, (simple_seen, simple.reject_reasons)
    a, b = simple.tables(), fast.tables()
    for table in a:
        assert a[table].num_rows == b[table].num_rows, table
        assert a[table].schema == b[table].schema
        for column in a[table].column_names:
            assert a[table][column].equals(b[table][column]), (table, column)
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=_documents(plain=True), ensure_ascii=st.booleans())
def test_the_fast_path_reads_plain_documents_as_the_simple_path_does(doc, ensure_ascii):
    body = _encoded(doc, ensure_ascii)
    assert _same_rows(body, Limits())  # plain: never declined


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=_documents(plain=False), ensure_ascii=st.booleans(), small=st.booleans(),
       cut=st.none() | st.integers(0, 400))
def test_hostile_documents_are_read_as_the_simple_path_reads_them_or_declined(doc, ensure_ascii, small, cut):
    body = _encoded(doc, ensure_ascii)
    if cut is not None:
        body = body[:cut]
    event("fast" if _same_rows(body, SMALL if small else Limits()) else "declined")


def test_every_fixture_and_the_bench_shapes_take_the_fast_path():
    assert FIXTURES
    for f in FIXTURES:
        body = f.read_bytes()
        assert _same_rows(body, Limits()), f.name
        assert _same_rows(json.dumps(json.loads(body)).encode(), Limits()), f.name


@pytest.mark.parametrize("body", [
    b'{"resourceSpans": [], "resourceSpans": null}',  # a repeated key: the later wins, in both
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "\\ud800"}]}]}]}',
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "\xff"}]}]}]}',
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "a\x01"}]}]}]}',
    b'\xef\xbb\xbf{"resourceSpans": []}', b'{"resourceSpans": []} x', b'{"resourceSpans": [NaN]}',
    b'[' * 10_000 + b']' * 10_000, b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [{"key": "k", '
    b'"value": ' + b'{"kvlistValue": {"values": [{"key": "k", "value": ' * 2_000 + b'{}' + b'}]}}' * 2_000 + b'}]}]}]}]}',
])
def test_odd_json_is_declined_or_read_alike(body):
    _same_rows(body, Limits())


@pytest.mark.parametrize("literal", [
    "2.2250738585072011e-308", "0.1000000000000000055511151231257827021181583404541015625", "9007199254740993",
    "1e23", "8.98846567431158e307", "4.9406564584124654e-324", "2.4703282292062327e-324", "1.7976931348623157e308",
    "1.7976931348623159e308", "-0.0", "0e0", "123456789012345678901234567890", "1" + "0" * 308, "1" + "0" * 309,
])
def test_double_literals_are_read_to_the_same_double(literal):
    # the two parsers must round every decimal literal to the same double, or the stored text differs
    template = {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "startTimeUnixNano": 1,
        "endTimeUnixNano": 2, "attributes": [{"key": "d", "value": {"doubleValue": "LITERAL"}},
                                             {"key": "assay.trial.score", "value": {"doubleValue": "LITERAL"}}]}]}]}]}
    body = json.dumps(template).replace('"LITERAL"', literal).encode()
    # past a double's range msgspec refuses the record, and the simple path reads it (as inf)
    assert _same_rows(body, Limits()) == math.isfinite(float(literal))


# ---------------------------------------------------------------------------- import: fast == pure Python
def _lake_bytes(lake: Path) -> dict[str, bytes]:
    return {str(p.relative_to(lake)): p.read_bytes() for p in sorted(lake.rglob("*.parquet"))}


def _import_both(tmp_path: Path, monkeypatch, files: list[Path], **kw):
    """Import ``files`` into two lakes, with and without the fast paths; return both results."""
    results = []
    for pure in ("1", "0"):
        monkeypatch.setenv("OTEL_ASSAY_PURE_PYTHON", pure)
        lake = tmp_path / f"lake-{pure}"
        results.append((import_files(files, lake, **kw), lake))
    (simple, simple_lake), (fast, fast_lake) = results
    for a, b in zip(simple.files, fast.files):
        assert a == b
    got, want = _lake_bytes(fast_lake), _lake_bytes(simple_lake)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name  # the same Parquet bytes
    return simple


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(docs=st.lists(_documents(plain=False) | _documents(plain=True), min_size=1, max_size=6),
       junk=st.lists(st.sampled_from([b"{not json", b"\xff\xfe", b"", b"[]", b'"x"']), max_size=2))
def test_import_with_fast_paths_writes_the_lake_the_simple_paths_write(tmp_path_factory, docs, junk):
    tmp_path = tmp_path_factory.mktemp("imp")
    with pytest.MonkeyPatch.context() as monkeypatch:
        f = tmp_path / "traces.jsonl"
        f.write_bytes(b"\n".join([_encoded(d, True) for d in docs] + junk) + b"\n")
        _import_both(tmp_path, monkeypatch, [f])


def test_every_fixture_imports_to_the_same_lake_as_json_lines_and_as_a_document(tmp_path, monkeypatch):
    lines = tmp_path / "fixtures.jsonl"
    lines.write_bytes(b"".join(json.dumps(json.loads(f.read_bytes())).encode() + b"\n" for f in FIXTURES))
    result = _import_both(tmp_path, monkeypatch, [lines, *FIXTURES])
    total = sum(len(s["spans"]) for f in FIXTURES for rs in json.loads(f.read_bytes())["resourceSpans"]
                for s in rs["scopeSpans"])
    assert result.ok and result.spans_imported == 2 * total > 0


def test_protobuf_files_import_through_the_compiled_decoder_to_the_same_lake(tmp_path, monkeypatch):
    from otel_assay.collect import compiled, synthetic
    from .test_import import not_utf8
    from .conftest import recorded_trials
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    if not compiled.available():
        pytest.skip("the compiled decoder is not built")
    import random

    records = [synthetic.request(20, rng=random.Random(i), start_ns=T0 + i).SerializeToString() for i in range(5)]
    records.append(encode_spans(recorded_trials(4)).SerializeToString())  # events, links, every value kind
    records.append(not_utf8(encode_spans(recorded_trials(2)), "span name")[0])  # declined: the simple path salvages
    bad_resource = encode_spans(recorded_trials(1))
    bad_resource.resource_spans[0].resource.attributes.add(key="note").value.string_value = "QQQQ-marker"
    records.append(bad_resource.SerializeToString().replace(b"QQQQ", b"\xff\xfeQQ"))  # refused, with the reason
    f = tmp_path / "traces.binpb"
    f.write_bytes(b"".join(struct.pack(">I", len(r)) + r for r in records))
    bare = tmp_path / "bare.binpb"
    bare.write_bytes(records[0])
    result = _import_both(tmp_path, monkeypatch, [f, bare])
    assert result.files[0].spans_imported > 100 and result.files[0].spans_rejected == 1
    assert result.files[0].errors == [f"record {len(records)}: malformed resource attributes: attribute key or "
                                      "string value is not valid UTF-8 (protobuf strings must be)"]
    assert result.files[1].format.startswith("protobuf (one bare message")
