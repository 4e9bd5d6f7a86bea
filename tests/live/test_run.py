"""otel-assay run: SPRT early stopping, resumption, error classes, timeouts, concurrency,
bad input. Real trial API, real lake, real DuckDB; scripted offline agents (tests/live/agents.py)."""

from __future__ import annotations

import json
import math
import textwrap
import time

import numpy as np
import pytest
from click.testing import CliRunner

import otel_assay
from otel_assay.analyze.engine import Engine
from otel_assay.errors import UsageError
from otel_assay.live.runner import run_suite
from otel_assay.live.scenarios import load_scenarios, parse_scenarios
from otel_assay.stats import plan_anytime_rate

from .agents import AsyncRouter, Router

CFG = {"threshold": 0.85, "alpha": 0.05, "beta": 0.1, "delta": 0.15, "method": "sprt", "n_max": 300}


def suite(**over):
    cfg = dict(CFG, **over)
    return parse_scenarios({"name": "routing", "config": cfg, "scenarios": [
        {"name": "billing", "input": "My payment failed", "properties": [{"expected": "billing"}, {"max_steps": 5}],
         "evaluator": "exact_match"}]})


def cli():
    import click  # noqa: F401
    from otel_assay.cli import cli as root
    from otel_assay.cli.live import register
    if "run" not in root.commands:
        register(root)
    return root


def lake_trials(lake, version):
    with Engine(lake) as eng:
        return eng.con.execute("SELECT trial_index, passed, counted, error_class FROM trials WHERE version = ? "
                               "ORDER BY trial_index, counted", [version]).fetchall()


@pytest.mark.parametrize("p,expected", [(0.99, "PASS"), (0.3, "FAIL")])
def test_sprt_stops_early_on_clear_agents(tmp_path, p, expected):
    r = run_suite(suite(), Router(p, seed=7), version="v", lake=str(tmp_path), concurrency=1)
    s = r.scenarios[0]
    assert s.decision == expected and s.stop_reason == "boundary"
    assert s.n < 30  # a fixed-n design at these (alpha, beta, delta) needs ~60-200
    # the lake holds exactly the trials run, and the gate's view counts them the same way
    rows = lake_trials(str(tmp_path), "v")
    assert [i for i, *_ in rows] == list(range(s.n))
    assert sum(bool(ps) for _, ps, c, _ in rows if c) == s.successes
    assert r.exit_code == (0 if expected == "PASS" else 1)


@pytest.mark.parametrize("p", [0.97, 0.6])
def test_trials_used_match_the_tests_simulated_expectation(tmp_path, p):
    """Mean trials of 40 seeded runs against the expectation that plans quote: the test
    itself, simulated (plan_anytime_rate), not a formula for another test."""
    ns, decisions = [], []
    for seed in range(40):
        r = run_suite(suite(), Router(p, seed=seed), version=f"s{seed}", lake=str(tmp_path / f"s{seed}"), concurrency=4,
                      resume=False)
        ns.append(r.scenarios[0].n)
        decisions.append(r.scenarios[0].decision)
    plan = plan_anytime_rate(p, 0.85, 0.15, 0.05, n_max=300, reps=4000, seed=0)
    mean, se = float(np.mean(ns)), float(np.std(ns, ddof=1) / math.sqrt(len(ns)))
    assert abs(mean - plan.expected_n) < 4 * se + 0.5, (mean, plan)
    want = "PASS" if p > 0.85 else "FAIL"
    assert decisions.count(want) >= 36


def test_resume_does_not_rerun_finished_trials(tmp_path):
    s = suite()
    first = Router(0.9, seed=11)
    # stop after ~4 trials on the token budget (140 tokens per trial): undecided
    r1 = run_suite(s, first, version="v", lake=str(tmp_path / "a"), budget_tokens=500, concurrency=1)
    assert r1.scenarios[0].decision == "INCONCLUSIVE" and r1.scenarios[0].stop_reason == "budget"
    assert r1.scenarios[0].more_trials_needed >= 1
    done = {i for _, i, _ in first.calls}
    second = Router(0.9, seed=11)
    r2 = run_suite(s, second, version="v", lake=str(tmp_path / "a"), concurrency=1)
    assert r2.scenarios[0].resumed == len(done)
    assert not done & {i for _, i, _ in second.calls}      # no finished trial ran again
    assert min(i for _, i, _ in second.calls) == max(done) + 1
    # exact warm start: same decision and sample size as one uninterrupted run
    fresh = run_suite(s, Router(0.9, seed=11), version="v", lake=str(tmp_path / "b"), concurrency=1)
    assert (r2.scenarios[0].decision, r2.scenarios[0].n, r2.scenarios[0].e_pass, r2.scenarios[0].e_fail) == \
        (fresh.scenarios[0].decision, fresh.scenarios[0].n, fresh.scenarios[0].e_pass, fresh.scenarios[0].e_fail)
    # a third run of the decided version runs nothing
    third = Router(0.9, seed=11)
    r3 = run_suite(s, third, version="v", lake=str(tmp_path / "a"), concurrency=1)
    assert third.calls == [] and r3.scenarios[0].stop_reason == "resumed"
    assert r3.scenarios[0].decision == fresh.scenarios[0].decision


def test_infrastructure_errors_are_retried_and_excluded(tmp_path):
    agent = Router(0.99, seed=1, infra_every=3)
    r = run_suite(suite(), agent, version="v", lake=str(tmp_path), concurrency=1, retries=2)
    s = r.scenarios[0]
    infra = [rec for rec in s.records if rec.error_class == "infrastructure"]
    assert infra and all(not rec.counted for rec in infra)
    assert s.retried == len(infra) and s.excluded == len(infra)
    assert s.decision == "PASS" and s.successes == s.n  # the infrastructure errors are not failures
    # the retry reused the index; the lake has one counted trial per index
    rows = lake_trials(str(tmp_path), "v")
    assert sorted({i for i, _, c, _ in rows if c}) == list(range(s.n))
    assert {e for i, _, c, e in rows if not c} == {"infrastructure"}


def test_retries_exhausted_leave_the_index_excluded(tmp_path):
    class AlwaysDown(Router):
        def __call__(self, text):
            raise ConnectionError("down")
    r = run_suite(suite(n_max=5), AlwaysDown(1.0), version="v", lake=str(tmp_path), retries=1)
    s = r.scenarios[0]
    assert s.n == 0 and s.decision == "INCONCLUSIVE" and s.stop_reason == "attempts"
    assert s.excluded == s.ran and s.ran == 2 * (3 * 5 + 10)


def test_timeout_after_a_tool_call_counts_as_failure(tmp_path):
    agent = Router(0.99, seed=1, hang_index=1)
    t0 = time.monotonic()
    r = run_suite(suite(method="fixed", trials=3), agent, version="v", lake=str(tmp_path), timeout=0.5,
                  concurrency=2)
    assert time.monotonic() - t0 < 4.5
    rec = next(x for x in r.scenarios[0].records if x.index == 1)
    assert rec.error_class == "timeout" and rec.counted and rec.passed is False
    assert r.scenarios[0].n == 3 and r.scenarios[0].successes == 2
    rows = lake_trials(str(tmp_path), "v")
    assert (1, False, True, "timeout") in rows


def test_tool_calls_after_a_timeout_do_not_make_it_count(tmp_path):
    """A sync agent's thread outlives its timeout and records its tool call later: the run
    excluded the trial (no work before the timeout), and the lake must say the same."""
    import otel_assay

    agent = Router(0.99, seed=1, sleep=0.8)
    r = run_suite(suite(method="fixed", trials=2), agent, version="v", lake=str(tmp_path), timeout=0.2,
                  concurrency=2)
    records = r.scenarios[0].records
    assert records and all((x.error_class, x.counted) == ("timeout", False) for x in records)
    deadline = time.monotonic() + 30
    while True:  # the agent threads finish their late steps
        time.sleep(0.5)
        otel_assay.flush()
        with Engine(str(tmp_path)) as eng:
            rows = eng.con.execute("SELECT error_class, counted, n_tool FROM trials WHERE version = 'v'").fetchall()
        if any(n_tool for *_, n_tool in rows) or time.monotonic() > deadline:
            break
    assert len(rows) == len(records) and all(row[:2] == ("timeout", False) for row in rows)
    assert any(n_tool == 1 for _, _, n_tool in rows)  # a late tool call is there, and does not count


def test_async_agent_runs_concurrently(tmp_path):
    agent = AsyncRouter(0.99, seed=1, sleep=0.2)
    t0 = time.monotonic()
    r = run_suite(suite(method="fixed", trials=16), agent, version="v", lake=str(tmp_path), concurrency=8)
    elapsed = time.monotonic() - t0
    assert r.scenarios[0].n == 16
    assert elapsed < 16 * 0.2 * 0.75  # 8 at a time: ~0.4 s of agent time, not 3.2 s


def test_sync_agent_concurrency_limit(tmp_path):
    import threading
    live, peak, lock = [0], [0], threading.Lock()

    class Counting(Router):
        def __call__(self, text):
            with lock:
                live[0] += 1
                peak[0] = max(peak[0], live[0])
            try:
                time.sleep(0.05)
                return super().__call__(text)
            finally:
                with lock:
                    live[0] -= 1
    r = run_suite(suite(method="fixed", trials=20), Counting(0.99), version="v", lake=str(tmp_path), concurrency=3)
    assert r.scenarios[0].n == 20 and peak[0] == 3


def test_fixed_method_runs_exactly_n(tmp_path):
    r = run_suite(suite(method="fixed", trials=25), Router(0.9, seed=5), version="v", lake=str(tmp_path),
                  concurrency=5)
    s = r.scenarios[0]
    assert s.n == 25 and s.decision in ("PASS", "INCONCLUSIVE", "FAIL") and s.ci_low is not None


def test_adaptive_method_calibrates(tmp_path):
    r = run_suite(suite(method="adaptive", calibration=10), Router(0.99, seed=5), version="v", lake=str(tmp_path))
    s = r.scenarios[0]
    assert s.variance_class is not None and s.target_n >= 15 and s.n == s.target_n


class _Volatile:
    """An agent whose runs differ a lot: 1 or 4 tool calls, 50 or 3,000 tokens, pass or fail."""

    def __call__(self, text: str) -> str:
        from .agents import _where, uniform

        sc, idx, _ = _where()
        big = uniform(9, sc, idx) < 0.5
        with otel_assay.step("m", kind="llm", model="m", provider="scripted") as s:
            s.usage(input_tokens=3000 if big else 50, output_tokens=10)
        for _ in range(4 if big else 1):
            with otel_assay.step("route_ticket", kind="tool") as s:
                s.result("x")
        return "billing" if uniform(10, sc, idx) < 0.5 else "sales"


def test_an_adaptive_run_sizes_itself_from_scaled_features_and_runs_to_its_target(tmp_path):
    # tokens in the thousands fed raw into a formula for [0, 1] features asked for
    # hundreds of thousands of trials; and the attempt limit, fixed at 3 x calibration + 10
    # before calibration, stopped every first run at 40
    s = run_suite(suite(method="adaptive", calibration=5), _Volatile(), version="v", lake=str(tmp_path),
                  concurrency=4).scenarios[0]
    assert s.variance_class == "volatile" and 3 * 5 + 10 < s.target_n < 200, (s.variance_class, s.target_n)
    assert s.n == s.target_n and s.stop_reason == "trials", (s.n, s.target_n, s.stop_reason)


def test_an_adaptive_run_resumed_after_calibration_goes_on_to_its_target(tmp_path):
    # stopped by its budget past calibration, a rerun launched nothing (its calibration sample
    # was empty, so the cap stayed the calibration count) and judged the calibration alone
    s = suite(method="adaptive", calibration=10)
    first = run_suite(s, Router(0.99, seed=5), version="v", lake=str(tmp_path), budget_tokens=12 * 140,
                      concurrency=1).scenarios[0]
    assert 10 <= first.n < first.target_n, (first.n, first.target_n)
    again = run_suite(s, Router(0.99, seed=5), version="v", lake=str(tmp_path), concurrency=1).scenarios[0]
    assert again.resumed == first.n and again.variance_class is not None
    assert again.n == again.target_n > first.n, (again.n, again.target_n, first.n)


# one scenario file for the CLI tests: a billing question the routing agent should answer
ROUTING = textwrap.dedent("""
    name: routing
    config: {threshold: 0.85, delta: 0.15, beta: 0.1, method: sprt, n_max: 100}
    scenarios:
      - name: billing
        input: My payment failed
        properties: {expected: billing}
        evaluator: {type: contains}
""")


def test_cli_run_and_gate(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(ROUTING)
    lake = str(tmp_path / "lake")
    r = CliRunner().invoke(cli(), ["run", str(f), "--agent", "tests.live.agents:good", "--version", "v1",
                                   "--dir", lake, "-q", "--json", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    assert "decision: PASS" in r.output
    r = CliRunner().invoke(cli(), ["run", str(f), "--agent", "tests.live.agents:bad", "--version", "v2",
                                   "--dir", lake, "-q", "--baseline", "version=v1"])
    assert r.exit_code == 1, r.output
    assert "decision: block (exit 1)" in r.output  # the gate decided: its word, not the verdict's FAIL


@pytest.mark.parametrize("baseline,code,needle", [
    ("foo", 3, "is not key=value"),
    ("version=v1,bogus=1", 3, "unknown selector key 'bogus'"),
    ("version=v0", 4, "no trials match version=v0"),
])
def test_a_baseline_the_gate_cannot_use_is_refused_before_any_trial(tmp_path, baseline, code, needle):
    # the gate at the end used to find out only after every trial had run (and been paid for)
    f = tmp_path / "s.yaml"
    f.write_text("scenarios:\n  - {name: billing, input: x, properties: {expected: billing}, evaluator: {type: contains}}\n")
    lake = str(tmp_path / "lake")
    args = ["run", str(f), "--agent", "tests.live.agents:good", "--dir", lake, "-q"]
    assert CliRunner().invoke(cli(), args + ["--version", "v1"]).exit_code == 0
    r = CliRunner().invoke(cli(), args + ["--version", "v2", "--baseline", baseline])
    assert r.exit_code == code, r.output
    assert needle in r.output and "Traceback" not in r.output
    with Engine(lake) as eng:
        assert eng.con.execute("SELECT count(*) FROM trials WHERE version = 'v2'").fetchall() == [(0,)]
    r = CliRunner().invoke(cli(), args + ["--version", "v2", "--baseline", "version=v1"])
    assert r.exit_code in (0, 1, 2), r.output
    r = CliRunner().invoke(cli(), ["run", str(f), "--agent", "tests.live.agents:good", "--dir",
                                   str(tmp_path / "empty"), "-q", "--version", "v2", "--baseline", "version=v1"])
    assert r.exit_code == 4 and "has no trials yet" in r.output, r.output


@pytest.mark.parametrize("value", ["5", "{version: v1}", "[version=v1]", "''"])
def test_a_baseline_in_the_file_must_be_a_selector_string(tmp_path, value):
    f = tmp_path / "s.yaml"
    f.write_text(f"baseline: {value}\nscenarios:\n  - {{name: a, input: x, evaluator: {{type: contains}}, "
                 "properties: {expected: x}}\n")
    r = CliRunner().invoke(cli(), ["run", str(f), "--agent", "tests.live.agents:good", "--version", "v",
                                   "--dir", str(tmp_path / "l")])
    assert r.exit_code == 3, r.output
    assert "baseline must be a selector string" in r.output
    assert not (tmp_path / "l").exists()


@pytest.mark.parametrize("text,agent,needle", [
    ("scenarios: [\n - {input: x", "tests.live.agents:good", "not valid YAML"),
    ("scenarios:\n  - {name: a, input: x, evaluator: fuzzy}\n", "tests.live.agents:good", "unknown evaluator 'fuzzy'"),
    ("scenarios:\n  - {name: a, input: x, evaluator: {type: regex, pattern: '('}}\n", "tests.live.agents:good",
     "does not compile"),
    ("scenarios:\n  - {name: a, input: x, evaluator: exact_match}\n", "tests.live.agents:good", "expected value"),
    ("config: {method: bayes}\nscenarios:\n  - {name: a, input: x}\n", "tests.live.agents:good", "method 'bayes'"),
    ("scenarios:\n  - {name: a, input: x}\n", "tests.live.nowhere:agent", "--agent 'tests.live.nowhere:agent'"),
    ("scenarios:\n  - {name: a, input: x}\n", "tests.live.agents:missing", "has no attribute missing"),
    ("agent: myapp.agents\nscenarios:\n  - {name: a, input: x}\n", "tests.live.agents:good",
     "agent must be module:callable"),
    ("scenarios:\n  - {name: a, input: x, evaluator: 'tests.live.agents:nope'}\n", "tests.live.agents:good",
     "evaluator 'tests.live.agents:nope'"),
    # a step property that is no tool name failed only at the first trial, or held vacuously
    ("scenarios:\n  - {name: a, input: x, properties: {must_call: 5}}\n", "tests.live.agents:good",
     "must_call must be a tool name"),
    ("scenarios:\n  - {name: a, input: x, properties: [{never_call: []}]}\n", "tests.live.agents:good",
     "never_call must be a tool name"),
    ("scenarios:\n  - {name: a, input: x, properties: {must_call: [lookup, true]}}\n", "tests.live.agents:good",
     "must_call must be a tool name"),
    # a misspelt step property or evaluator option judged nothing: every trial passed it
    ("scenarios:\n  - {name: a, input: x, properties: {max_step: 0}}\n", "tests.live.agents:good",
     "scenario 'a': unknown property 'max_step' (did you mean 'max_steps'?); properties: max_steps, max_tool_calls, "
     "must_call, never_call, expected, expected_<field>"),
    ("scenarios:\n  - {name: a, input: x, properties: [{expected: billing}, {must_cal: lookup}]}\n",
     "tests.live.agents:good", "unknown property 'must_cal' (did you mean 'must_call'?)"),
    ("scenarios:\n  - {name: a, input: x, properties: {rubric: strict}}\n", "tests.live.agents:good",
     "unknown property 'rubric'; properties: max_steps"),
    # a callable evaluator may read properties of its own, but not one spelt like a step property
    ("scenarios:\n  - {name: a, input: x, evaluator: 'tests.live.test_run:_is_billing', properties: {never_cal: x}}\n",
     "tests.live.agents:good", "unknown property 'never_cal' (did you mean 'never_call'?)"),
    ("scenarios:\n  - {name: a, input: x, evaluator: {type: contains, value: billing, ignore_cas: false}}\n",
     "tests.live.agents:good", "evaluator contains: unknown key 'ignore_cas' (did you mean 'ignore_case'?); "
     "its keys: type, value, ignore_case"),
    # a scenarios file's schema fetched its $refs over HTTP or from local files
    ("scenarios:\n  - {name: a, input: x, evaluator: {type: json_schema, schema: "
     "{properties: {a: {$ref: 'file:///etc/hostname'}}}}}\n",
     "tests.live.agents:good", "$ref 'file:///etc/hostname' at /properties/a/$ref does not point to a part"),
    ("scenarios:\n  - {name: a, input: x, evaluator: {type: contract, contracts: [{final_output_json_schema: "
     "{$ref: 'http://127.0.0.1:9/s.json'}}]}}\n",
     "tests.live.agents:good", "$ref 'http://127.0.0.1:9/s.json' at /$ref does not point to a part"),
])
def test_bad_input_exits_3_naming_the_item(tmp_path, text, agent, needle):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    r = CliRunner().invoke(cli(), ["run", str(f), "--agent", agent, "--version", "v", "--dir", str(tmp_path / "l")])
    assert r.exit_code == 3, r.output
    assert needle in r.output
    assert not (tmp_path / "l").exists()


def test_evaluators():
    def ev(spec, props, out):
        s = parse_scenarios({"scenarios": [{"name": "a", "input": "x", "properties": props, "evaluator": spec}]})
        return s.scenarios[0].judge(out)[0]
    assert ev("exact_match", [{"expected_department": "billing"}], {"department": "billing"})
    assert not ev("exact_match", [{"expected_department": "billing"}], {"department": "sales"})
    assert ev({"type": "contains", "value": ["refund", "order"]}, {}, "Refund issued for order 7")
    assert ev({"type": "regex", "pattern": r"ORD-\d+"}, {}, "see ORD-123")
    assert ev({"type": "json_schema", "schema": {"type": "object", "required": ["a"]}}, {}, '{"a": 1}')
    assert not ev({"type": "json_schema", "schema": {"type": "object", "required": ["a"]}}, {}, '{"b": 1}')
    assert ev("tests.live.test_run:_is_billing", {}, "billing")
    assert not ev("tests.live.test_run:_is_billing", {}, "sales")


def test_a_callable_evaluator_reads_properties_of_its_own():
    s = parse_scenarios({"scenarios": [{"name": "a", "input": "x", "evaluator": "tests.live.test_run:_is_billing",
                                        "properties": {"rubric": "strict", "max_steps": 3}}]})
    assert s.scenarios[0].properties == {"rubric": "strict", "max_steps": 3}


def _is_billing(output, scenario):
    return output == "billing", 1.0


def test_a_json_path_that_cannot_be_written_is_refused_before_any_trial(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("scenarios:\n  - {name: billing, input: x, properties: {expected: billing}, evaluator: {type: contains}}\n")
    r = CliRunner().invoke(cli(), ["run", str(f), "--agent", "tests.live.agents:good", "--version", "v1",
                                   "--dir", str(tmp_path / "lake"), "-q", "--json", str(tmp_path / "no" / "r.json")])
    assert r.exit_code == 3 and "does not exist" in r.output
    assert not (tmp_path / "lake").exists()  # no trial ran


def test_unknown_scenario_selection(tmp_path):
    with pytest.raises(UsageError, match="no scenario 'x'"):
        run_suite(suite(), Router(0.9), version="v", lake=str(tmp_path), scenarios=["x"])


def test_example_scenario_file_loads():
    s = load_scenarios("examples/scenarios/ticket_routing.yaml")
    assert {x.name for x in s.scenarios} >= {"billing"}


def test_progress_display_rows(tmp_path):
    from otel_assay.live.display import bar as _bar, row as _row
    seen = []
    r = run_suite(suite(), Router(0.99, seed=7), version="v", lake=str(tmp_path), progress=lambda runs: seen.append(
        [_row(s) for s in runs]))
    assert len(seen) >= r.scenarios[0].n
    assert seen[0][0][4] == "running" and seen[-1][0][4] == "PASS"
    assert "PASS |" in seen[-1][0][3] and "| FAIL" in seen[-1][0][3]
    assert _bar(1000.0, 0.01, 0.05).startswith("PASS |●") and _bar(0.01, 1000.0, 0.05).endswith("●| FAIL")
    assert _bar(1.0, 1.0, 0.05) == "PASS |───────●───────| FAIL"


def test_stochastic_decorator_validates():
    from otel_assay.live.stochastic import stochastic
    with pytest.raises(UsageError, match="method 'bayes'"):
        stochastic(method="bayes")
    with pytest.raises(UsageError, match="threshold - delta"):
        stochastic(threshold=0.1, delta=0.2)


@pytest.mark.parametrize("kwargs,needle", [
    ({"timeout": -1}, "timeout must be > 0"), ({"timeout": "x"}, "timeout"), ({"timeout": math.nan}, "timeout"),
    ({"retries": -1}, "retries"), ({"retries": 1.5}, "retries"), ({"concurrency": 0}, "concurrency"),
    ({"concurrency": -2}, "concurrency"), ({"baseline": 5}, "baseline must be a selector string"),
    ({"baseline": "v1"}, "is not key=value"), ({"scenario": 5}, "scenario must be a non-empty string"),
])
def test_stochastic_decorator_validates_the_run_options(kwargs, needle):
    # these went unchecked into the trials: timeout=-1 or "x" made a sound agent FAIL 0/20
    from otel_assay.live.stochastic import stochastic
    with pytest.raises(UsageError, match=needle):
        stochastic(trials=20, method="fixed", **kwargs)
    spec = stochastic(timeout=2.5, retries=0, concurrency=3, baseline="version=v1")(lambda: True)
    from otel_assay.live.stochastic import ATTR
    s = getattr(spec, ATTR)
    assert (s.timeout, s.retries, s.concurrency, s.baseline) == (2.5, 0, 3, "version=v1")


def test_dollar_budget_prices_llm_calls(tmp_path):
    from .mutation_agents import CONFIG, make_agent
    agent = make_agent(CONFIG)  # gpt-4o: 120 input + 5 output tokens per trial = $0.00035
    r = run_suite(suite(method="fixed", trials=100), agent, version="v", lake=str(tmp_path), budget_dollars=0.002)
    s = r.scenarios[0]
    assert s.stop_reason == "budget" and 5 <= s.ran <= 7
    assert r.cost_usd == pytest.approx(s.ran * (120 * 2.5 + 5 * 10.0) / 1e6)
    with pytest.raises(UsageError, match="model 'scripted-router-1' has no price"):
        run_suite(suite(), Router(0.9), version="w", lake=str(tmp_path), budget_dollars=1.0)


def test_contract_evaluator(tmp_path):
    def run(contracts):
        s = parse_scenarios({"config": {"method": "fixed", "trials": 5}, "scenarios": [
            {"name": "c", "input": "x", "evaluator": {"type": "contract", "contracts": contracts}}]})
        return run_suite(s, Router(1.0), version="v", lake=str(tmp_path), resume=False).scenarios[0]
    assert run([{"must_call": "route_ticket"}, {"max_steps": 2}, {"final_output_matches": "^billing$"},
                {"max_tokens": 200}]).successes == 5
    bad = run([{"never_call": "route_ticket"}])
    assert bad.successes == 0 and "never_call" in bad.records[0].reason
    assert run([{"call_order": ["route_ticket", "lookup"]}]).successes == 0
    with pytest.raises(UsageError, match="judged on the lake"):
        run([{"max_cost_usd": 1.0}])
    with pytest.raises(UsageError, match="unknown key 'bogus'"):
        run([{"bogus": 1}])


def _cli_process(tmp_path, agent_source: str, agent: str, config: str, env_extra=None):
    """`otel-assay run s.yaml --dir lake` started in a fresh process in ``tmp_path``, whose
    agent module (``agent_source``) is importable from there."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / f"{agent.split(':')[0]}.py").write_text(agent_source)
    (tmp_path / "s.yaml").write_text(f"config: {config}\nscenarios:\n"
                                     "  - {name: billing, input: My payment failed, properties: {expected: billing},"
                                     " evaluator: {type: contains}}\n")
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=f"{repo}{os.pathsep}{tmp_path}", **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-m", "otel_assay", "run", "s.yaml", "--agent", agent,
                             "--version", "v1", "--dir", "lake", "-q"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run_in(tmp_path, env_extra):
    """A run whose agent module imports otel_assay.auto (capture starts before the command
    picks its lake); returns (exit code, stderr)."""
    p = _cli_process(tmp_path, "import otel_assay.auto  # noqa: F401\nfrom tests.live.agents import good\n",
                     "my_agent:good", "{n_max: 30}", env_extra)
    _out, err = p.communicate(timeout=300)
    return p.returncode, err


def test_run_writes_only_its_lake(tmp_path):
    code, err = _run_in(tmp_path, {})
    assert code == 0, err
    assert lake_trials(tmp_path / "lake", "v1")
    assert not (tmp_path / "traces").exists()  # the default lake of the import, never written


def test_run_dir_wins_over_an_otlp_endpoint_in_the_environment(tmp_path):
    # --dir names the lake the run resumes from and reports on: the trials must be there
    code, err = _run_in(tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert code == 0, err
    assert lake_trials(tmp_path / "lake", "v1")


def test_sigterm_keeps_the_finished_trials(tmp_path):
    """A cancelled CI job sends SIGTERM: trials that finished are in the lake, so a rerun resumes."""
    import signal

    p = _cli_process(tmp_path, "from tests.live.agents import Router\nslow = Router(0.99, seed=1, sleep=0.05)\n",
                     "slow_agent:slow", "{method: fixed, trials: 400}", {"OTEL_ASSAY_FLUSH_SECONDS": "60"})
    time.sleep(6.0)  # start-up, then trials finish, buffered (flush every 60 s)
    assert p.poll() is None, p.communicate()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    done = lake_trials(tmp_path / "lake", "v1")
    assert len(done) >= 10, (len(done), err)
    # the trial that was running is ended and excluded, not left without its root span
    assert all(error_class in (None, "infrastructure") for *_, error_class in done)
    with Engine(str(tmp_path / "lake")) as eng:
        rootless = eng.con.execute("SELECT count(*) FROM trials WHERE scenario IS NULL OR outcome IS NULL").fetchall()
    assert rootless == [(0,)]


def test_a_run_whose_trials_all_time_out_stops_early_with_a_hint(tmp_path, monkeypatch):
    (tmp_path / "sleepy_agent.py").write_text("from tests.live.agents import Router\nsleepy = Router(0.99, seed=1, sleep=0.6)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    f = tmp_path / "s.yaml"
    f.write_text("config: {n_max: 100}\nscenarios:\n"
                 "  - {name: billing, input: x, properties: {expected: billing}, evaluator: {type: contains}}\n")
    r = CliRunner().invoke(cli(), ["run", str(f), "--agent", "sleepy_agent:sleepy", "--version", "v1",
                                   "--dir", str(tmp_path / "lake"), "--timeout", "0.1"])
    assert r.exit_code == 2, r.output
    assert "timeouts" in r.output and "raise --timeout" in r.output
    assert len(lake_trials(str(tmp_path / "lake"), "v1")) < 20  # stopped, not 3 * n_max attempts


@pytest.mark.parametrize("alpha,label", [(0.1, "90% interval"), (0.05, "95% interval"), (0.01, "99% interval")])
def test_stochastic_message_names_the_level_of_its_interval(tmp_path, alpha, label):
    # the interval is at 1 - alpha; the message called it "95%" whatever alpha was
    from otel_assay.live.stochastic import StochasticSpec, run_stochastic
    from otel_assay.stats import anytime_rate

    agent = Router(0.99, seed=1)
    spec = StochasticSpec(trials=30, threshold=0.5, alpha=alpha, method="fixed")
    res = run_stochastic(lambda: agent("My payment failed") == "billing", spec, scenario="billing", version="v",
                         lake=str(tmp_path / "lake"))
    # the bounds are the anytime-valid ones of the test that decided, at level 1 - alpha
    outs = [t.passed for t in sorted(res.run.scenarios[0].records, key=lambda t: t.index) if t.counted]
    v = anytime_rate(outs, 0.5, spec.delta, alpha, spec.beta)
    assert (res.ci_low, res.ci_high) == (v.lower, v.upper)
    assert f"{label} [{v.lower:.3f}, {v.upper:.3f}]" in res.message()


@pytest.mark.parametrize("command", ["run", "mutate"])
def test_a_command_line_that_does_not_parse_leaves_no_earlier_report_behind(tmp_path, command):
    # CI uploads whatever --json file is there: an earlier run's would pass for this one's
    from otel_assay.cli import cli as root

    report, config = tmp_path / "r.json", tmp_path / "agent.yaml"
    for f in (report, config):
        f.write_text("from an earlier run")
    r = CliRunner().invoke(root, [command, str(tmp_path / "s.yaml"), "--json", str(report), "--config", str(config),
                                  "--bogus"])
    assert r.exit_code == 2, r.output  # click's usage error; `otel-assay` exits 3 for it
    assert "--bogus" in r.output and not report.exists() and config.exists()


@pytest.mark.parametrize("code", [0, None, 3])
@pytest.mark.parametrize("is_async", [False, True])
def test_an_agent_that_calls_sys_exit_fails_its_trial_not_the_run(tmp_path, code, is_async):
    """sys.exit() in the agent used to end `otel-assay run` with the agent's code after one
    trial: sys.exit(0) exited 0 (deploy) with no verdict, under a traceback (a sync agent)
    or silently (an async one)."""
    import sys

    class Exits(Router):
        def __call__(self, text):
            super().__call__(text)  # records an LLM call and a tool call, then exits
            sys.exit(code)

    class AsyncExits(Router):
        async def __call__(self, text):  # exits in the task's first step, before any await
            Router.__call__(self, text)
            sys.exit(code)

    agent = AsyncExits(1.0) if is_async else Exits(1.0)
    # with a timeout, an async agent runs in a task of its own, out of which asyncio raises a
    # SystemExit past everything
    r = run_suite(suite(), agent, version="v", lake=str(tmp_path), concurrency=1, timeout=30)
    s = r.scenarios[0]
    assert s.decision == "FAIL" and s.successes == 0 and r.exit_code == 1
    assert "sys.exit" in s.records[0].reason
    # the lake counts the same failed trials, so the gate and a resumed run agree
    rows = lake_trials(str(tmp_path), "v")
    assert [(i, ps, c) for i, ps, c, _ in rows] == [(i, False, True) for i in range(s.n)]


def test_contract_evaluator_matches_with_re2_as_the_lake_does(tmp_path):
    """final_output_matches is checked with RE2 when the scenario file loads, and the lake
    judges it with RE2; the live evaluator used Python's re, which rejects `\\z` and `\\pL` (the
    run stopped with exit 3 after the first paid trial) and backtracks without end on `(a+)+$`."""
    def run(pattern, agent=Router(1.0)):
        s = parse_scenarios({"config": {"method": "fixed", "trials": 3}, "scenarios": [
            {"name": "c", "input": "x", "evaluator": {"type": "contract",
                                                       "contracts": [{"final_output_matches": pattern}]}}]})
        return run_suite(s, agent, version="v", lake=str(tmp_path), resume=False).scenarios[0]
    assert run(r"^billing\z").successes == 3
    assert run(r"^\pL+$").successes == 3
    assert run(r"^sales\z").successes == 0

    class Bomb(Router):
        def __call__(self, text):
            super().__call__(text)
            return "a" * 40 + "!"
    t0 = time.monotonic()
    assert run(r"(a+)+$", Bomb(1.0)).successes == 0
    assert time.monotonic() - t0 < 30


def test_a_run_whose_agent_hangs_past_its_timeout_still_exits(tmp_path):
    """The trial threads were a ThreadPoolExecutor's, which Python joins at exit: after an
    agent hung past --timeout, `otel-assay run` printed its decision and never exited."""
    import subprocess

    source = ("import time\nimport otel_assay\n\ndef hang(text):\n"
              "    with otel_assay.step('lookup', kind='tool') as s:\n        s.result('x')\n"
              "    time.sleep(3600)\n")
    # six trials: the fewest failures that FAIL a threshold of 0.85 at every look
    p = _cli_process(tmp_path, source, "hang_agent:hang", "{method: fixed, trials: 6, timeout: 0.5}")
    try:
        out, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("otel-assay run did not exit after its agent hung")
    # the timeouts came after a tool call: six counted failures
    assert p.returncode == 1 and "FAIL" in out, (out, err)


def test_run_with_a_gate_config_holding_a_sql_contract(tmp_path):
    """The gate at the end of `otel-assay run` judges `sql:` contracts in a locked-down copy of its
    engine; the run's own lake reads and writes are untouched by it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    f = tmp_path / "s.yaml"
    f.write_text(ROUTING)
    gate_cfg = tmp_path / "assay.yaml"
    gate_cfg.write_text("contracts:\n  - name: short\n    sql: \"n_steps <= (SELECT 50 FROM trials LIMIT 1)\"\n")
    lake = tmp_path / "lake"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "otel_assay", "run", f, "--dir", lake, *args],
                              capture_output=True, text=True, timeout=300, env=env,
                              cwd=Path(__file__).resolve().parents[2])

    r = run("--agent", "tests.live.agents:good", "--version", "v1", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run("--agent", "tests.live.agents:bad", "--version", "v2", "--baseline", "version=v1", "--config", gate_cfg)
    assert r.returncode == 1 and "decision: BLOCK (exit 1)" in r.stdout, r.stdout + r.stderr
    contracts = next(line for line in r.stdout.splitlines() if line.lstrip().startswith("contracts "))
    import re
    assert re.search(r"short INCONCLUSIVE \((\d+)/\1 hold", contracts), r.stdout  # judged: it holds, on few trials


def test_the_more_trials_hint_names_the_cap_it_is_past(tmp_path):
    """`+45 needed` after an SPRT stopped at n_max 20 asked for trials no rerun could run (a rerun
    of the version resumes at 20 and stops there): the hint says which setting to raise."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    f = tmp_path / "s.yaml"
    f.write_text(textwrap.dedent("""
        config: {threshold: 0.85, delta: 0.15, beta: 0.1, method: sprt, n_max: 20}
        scenarios:
          - {name: billing, input: My payment failed, properties: {expected: billing}, evaluator: contains}
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    r = subprocess.run([sys.executable, "-m", "otel_assay", "run", f, "--agent", "tests.live.agents:middling",
                        "--version", "v1", "--dir", tmp_path / "lake"], capture_output=True, text=True, timeout=300,
                       env=env, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 2, r.stdout + r.stderr
    m = re.search(r"n_max \(\+(\d+) needed, past n_max\)", r.stdout)
    assert m, r.stdout
    need = int(m.group(1))
    assert (f"hint: billing: about {need} more trials needed, past n_max 20: raise n_max to about {20 + need} in "
            "the scenario file's config, then run again") in r.stderr, r.stderr
    # within the cap (a run stopped early by its budget): the count alone
    from otel_assay.live.runner import more_trials_text

    s = suite(n_max=300)
    run = run_suite(s, Router(0.9, seed=11), version="v", lake=str(tmp_path / "b"), budget_tokens=500, concurrency=1)
    sc = run.scenarios[0]
    assert sc.decision == "INCONCLUSIVE" and sc.past_cap is None
    assert more_trials_text(sc.more_trials_needed, sc.n, sc.config) == f"about {sc.more_trials_needed} more trials needed"


def test_a_reader_that_stops_early_changes_neither_the_verdict_nor_the_json(tmp_path):
    """`run ... | head`: rich and click exited 1 on the broken pipe, which reads as FAIL (under
    `set -o pipefail`, GitHub Actions' default shell, the step's exit code) for a PASSing suite,
    and --json was never written. A reader that exits at once (`true`) breaks the pipe before
    the first line."""
    import json
    import os
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    f = tmp_path / "s.yaml"
    f.write_text("config: {threshold: 0.85, delta: 0.15, method: sprt, n_max: 100}\nscenarios:\n"
                 "  - {name: billing, input: My payment failed, properties: {expected: billing},"
                 " evaluator: {type: contains}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    for quiet in ([], ["-q"]):
        report = tmp_path / f"r{len(quiet)}.json"
        cmd = shlex.join([sys.executable, "-m", "otel_assay", "run", str(f), "--agent", "tests.live.agents:good",
                          "--version", "v1", "--dir", str(tmp_path / "lake"), "--json", str(report), *quiet])
        p = subprocess.run(["bash", "-o", "pipefail", "-c", f"{cmd} | true"], capture_output=True, text=True,
                           timeout=300, env=env)
        assert p.returncode == 0, (quiet, p.stderr)
        assert json.loads(report.read_text())["decision"] == "PASS"
        assert "Traceback" not in p.stderr, p.stderr


def test_a_sql_contract_that_cannot_run_is_refused_before_any_trial(tmp_path):
    # it was refused by the gate at the end, after every trial had been run and paid for
    import os
    import subprocess
    import sys
    from pathlib import Path

    f = tmp_path / "s.yaml"
    f.write_text(ROUTING)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    for expr, why in (("n_stepz <= 5", "not found"), ("(SELECT count(*) FROM read_csv('/etc/passwd')) > 0",
                                                      "not other files")):
        cfg = tmp_path / "assay.yaml"
        cfg.write_text("contracts:\n  - name: short\n    sql: " + json.dumps(expr) + "\n")
        lake = tmp_path / f"lake-{why[:3]}"
        r = subprocess.run([sys.executable, "-m", "otel_assay", "run", f, "--agent", "tests.live.agents:good",
                            "--version", "v1", "--dir", lake, "--config", cfg], capture_output=True, text=True,
                           timeout=300, env=env, cwd=Path(__file__).resolve().parents[2])
        assert r.returncode == 3 and "contract 'short'" in r.stderr and why in r.stderr, r.stdout + r.stderr
        assert not list(lake.rglob("*.parquet")), "trials ran"


def test_a_run_against_a_baseline_stops_on_the_gates_regression_test(tmp_path):
    """With a baseline, the run stops a scenario when the gate's regression test on the same
    pairs decides, at the level the gate's correction holds it to, so the gate agrees; and when
    the baseline has no more trials to pair with, it says so instead of running on."""
    lake = str(tmp_path / "lake")
    run_suite(suite(method="fixed", trials=40), Router(0.95, seed=1), version="v1", lake=lake, concurrency=2)
    # a broken candidate: FAIL on the regression test, and the gate blocks on the same trials
    r = run_suite(suite(), Router(0.3, seed=2), version="v2", lake=lake, concurrency=2, baseline="version=v1")
    s = r.scenarios[0]
    assert (s.decision, s.stop_reason) == ("FAIL", "boundary") and s.n < 40, (s.decision, s.stop_reason, s.n)
    reg = r.gate.scenarios[0].check("regression")
    assert reg.verdict == "FAIL" and r.gate.decision == "block", reg.reason
    assert reg.stats["paired_by"] == "trial index" and reg.stats["pairs"] == s.n
    # an unchanged candidate needs more pairs than 40 baseline trials give
    r = run_suite(suite(), Router(0.95, seed=3), version="v3", lake=lake, concurrency=2, baseline="version=v1")
    s = r.scenarios[0]
    assert (s.decision, s.stop_reason, s.n) == ("INCONCLUSIVE", "baseline", 41), (s.decision, s.stop_reason, s.n)
    assert s.more_trials_needed is None


def test_the_plan_predicts_the_trials_a_run_against_a_baseline_takes(tmp_path):
    """`otel-assay plan` simulates the regression test against the stored baseline's own
    outcomes; 40 runs of a candidate that dropped by delta stop, on average, where it says
    (within 15 %, and within 4 standard errors of their mean)."""
    from otel_assay.gate import GateConfig
    from otel_assay.gate.plan import plan

    lake = str(tmp_path / "lake")
    run_suite(suite(method="fixed", trials=300), Router(0.85, seed=1), version="v1", lake=lake, concurrency=4)
    cfg = suite().config
    gcfg = GateConfig(alpha=cfg.alpha, beta=cfg.beta, delta=0.3, threshold=cfg.threshold)
    ns = [run_suite(suite(), Router(0.55, seed=100 + k), version=f"c{k}", lake=lake, concurrency=4,
                    baseline="version=v1", gate_config=gcfg).scenarios[0].n for k in range(40)]
    want = plan(lake, gcfg, baseline="version=v1", reps=4000).scenarios[0].dropped.expected_n
    mean, se = float(np.mean(ns)), float(np.std(ns, ddof=1) / math.sqrt(len(ns)))
    assert abs(mean - want) < 4 * se + 0.5 and abs(mean - want) <= 0.15 * want, (mean, se, want)
