import math

import pytest

from otel_assay.stats import (
    agent_coverage,
    boundary_coverage,
    chao1,
    good_turing_coverage,
    model_coverage,
    overall_coverage,
    path_coverage,
    state_coverage,
    tool_coverage,
)


def test_tool_coverage_doc_example():
    c = tool_coverage({"search", "calculate", "read_file"}, ["search", "calculate", "write_file", "read_file", "send_email"])
    assert c.value == pytest.approx(0.6) and c.observed == 3 and c.denominator == 5
    extra = tool_coverage(["search", "legacy"], ["search", "calc"])
    assert extra.value == 0.5 and "legacy" in extra.note
    assert tool_coverage(["search"], []).value is None


def test_chao1_and_path_coverage():
    paths = {("a",): 5, ("a", "b"): 2, ("b",): 1, ("c",): 1, ("d", "e"): 2}
    # d = 5, n = 11, f1 = 2, f2 = 2 -> 5 + (10/11) * 2 * 1 / (2 * 3) = 5.3030...
    assert chao1(paths) == pytest.approx(5 + 10 / 11 * 2 / 6)
    c = path_coverage(paths)
    assert c.value == pytest.approx(5 / (5 + 10 / 11 * 2 / 6)) and c.sample_coverage == pytest.approx(1 - 2 / 11)
    # f2 = 0: finite (the classic f1^2 / (2 f2) divides by zero)
    singletons = [("x", i) for i in range(4)] + [("y",)] * 3
    n = 7
    assert chao1(singletons) == pytest.approx(5 + (n - 1) / n * 4 * 3 / 2)
    # no singletons: nothing unseen is estimated
    assert chao1({"a": 2, "b": 3}) == 2.0
    # 10 seen in 24 observations, 4 once and 2 twice -> 10 + (23/24) * 4 * 3 / (2 * 3)
    counts = {i: 1 for i in range(4)} | {i: 2 for i in range(4, 6)} | {i: 4 for i in range(6, 10)}
    assert chao1(counts) == pytest.approx(10 + (23 / 24) * 4 * 3 / (2 * 3))
    assert path_coverage([["a", "b"], ["a", "b"]]).value == 1.0  # lists are accepted as paths
    assert path_coverage([]).value is None and good_turing_coverage([]) is None


def test_state_coverage_eq17_and_lambda_override():
    c = state_coverage(range(50))
    assert c.value == pytest.approx(1 - math.exp(-1)) and "lambda=50" in c.note
    assert state_coverage(range(50), lam=100).value == pytest.approx(1 - math.exp(-0.5))
    assert state_coverage([]).value is None
    with pytest.raises(ValueError, match="lam"):
        state_coverage([1], lam=0)


def test_overall_is_weighted_geometric_mean_over_defined_dimensions():
    r = agent_coverage(tools_used={"a", "b"}, tools_available={"a", "b", "c", "d"},
                       paths={"p1": 3, "p2": 2}, models_tested={"m1"}, models_target={"m1", "m2"})
    assert r.undefined == ("state", "boundary")
    assert r.overall == pytest.approx((0.5 * 1.0 * 0.5) ** (1 / 3))
    assert r.get("boundary").value is None  # n/a, not 1.0
    w = overall_coverage(r.dimensions, {"tool": 2.0, "model": 1.0, "path": 1.0})
    assert w.overall == pytest.approx(0.5**0.5 * 1.0**0.25 * 0.5**0.25)
    zero = agent_coverage(tools_used=set(), tools_available={"a"}, models_tested={"m"}, models_target={"m"})
    assert zero.overall == 0.0
    assert agent_coverage().overall is None
    b = boundary_coverage({("t", "x", "max")}, {("t", "x", "max"), ("t", "x", "min")})
    assert b.value == 0.5 and model_coverage(["m"], ["m"]).value == 1.0


def test_bad_input():
    with pytest.raises(ValueError, match="counts"):
        path_coverage({"p": -1})
    with pytest.raises(ValueError, match="weights"):
        overall_coverage([tool_coverage(["a"], ["a"])], {"nope": 1.0})
    with pytest.raises(ValueError, match="weights"):
        overall_coverage([tool_coverage(["a"], ["a"])], {"tool": float("nan")})
