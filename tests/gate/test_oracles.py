"""Contracts and metamorphic relations inside the gate (config, checks, outcomes from contracts)."""

from __future__ import annotations

import json

import pytest

from otel_assay.gate import parse_config, run_gate

from .conftest import cli
from .lakes import write_trials


def test_contract_violated_by_the_regressed_agent_blocks(agent_lakes, tmp_path):
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("contracts:\n  - must_call: lookup_order\n  - max_tool_calls: 10\n    name: bounded\n")
    out = tmp_path / "report.json"
    r = cli("gate", str(agent_lakes["candidate_lake"]), "--baseline-lake", str(agent_lakes["lake"]),
            "--baseline", "version=v1", "--config", str(cfg), "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads(out.read_text())
    checks = {(s["scenario"], c["name"]): c for s in report["scenarios"] for c in s["checks"]}
    for scenario in ("refund-request", "order-status"):
        c = checks[(scenario, "contracts")]
        assert c["verdict"] == "FAIL" and "must_call FAIL" in c["reason"]
        detail = c["stats"]["contracts"]["must_call"]
        assert detail["holds"] == 0 and detail["baseline"]["holds"] == detail["baseline"]["n"] > 0
        assert detail["baseline"]["regression"] == "FAIL"
    assert any("contracts FAIL" in reason for reason in report["reasons"])


def test_a_candidate_lake_that_stopped_calling_a_required_tool_is_blocked_not_refused(tmp_path):
    """The tool exists in the baseline lake: a must_call on it is a regression to judge, not a typo."""
    base = write_trials(tmp_path / "base", [{"scenario": "s", "version": "v1", "outcome": "pass",
                                             "tools": ["lookup", "answer"]} for _ in range(30)])
    cand = write_trials(tmp_path / "cand", [{"scenario": "s", "version": "v2", "outcome": "pass",
                                             "tools": ["answer"]} for _ in range(30)])
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("contracts:\n  - must_call: lookup\n")
    r = cli("gate", str(cand), "--baseline-lake", str(base), "--config", str(cfg))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "contracts FAIL" in r.stdout
    # the summary table has a column for it, as for every other check
    header = next(line for line in r.stdout.splitlines() if line.lstrip().startswith("scenario"))
    row = next(line for line in r.stdout.splitlines() if line.startswith("s "))
    assert header.split()[-2:] == ["contr.", "verdict"] and row.split()[-2:] == ["FAIL", "FAIL"], r.stdout
    cfg.write_text("contracts:\n  - must_call: lookupp\n")  # in neither lake: still a typo
    r = cli("gate", str(cand), "--baseline-lake", str(base), "--config", str(cfg))
    assert r.returncode == 3 and "unknown tool 'lookupp'" in r.stderr


def test_outcomes_from_contracts_feed_the_regression_check(tmp_path):
    lake = tmp_path / "lake"
    trials = [{"scenario": "s", "version": "v1", "outcome": None, "tools": ["lookup", "answer"]} for _ in range(60)]
    trials += [{"scenario": "s", "version": "v2", "outcome": None,
                "tools": ["lookup", "answer"] if i % 2 else ["answer"]} for i in range(60)]
    write_trials(lake, trials)
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("checks: {fingerprint: false}\ncontracts:\n  - must_call: lookup\n"
                   "outcome_from_contracts: [must_call]\n")
    out = tmp_path / "r.json"
    r = cli("gate", str(lake), "--baseline", "version=v1", "--candidate", "version=v2", "--config", str(cfg),
            "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads(out.read_text())
    checks = {c["name"]: c for c in report["scenarios"][0]["checks"]}
    assert checks["regression"]["verdict"] == "FAIL"
    assert any("took it from the contracts must_call" in n for n in report["notes"])
    # without the contract-derived outcomes there is nothing for the regression check to test
    cfg.write_text("checks: {fingerprint: false}\ncontracts:\n  - must_call: lookup\n    threshold: 0.3\n")
    r = cli("gate", str(lake), "--baseline", "version=v1", "--candidate", "version=v2", "--config", str(cfg),
            "--json", str(out))
    checks = {c["name"]: c for c in json.loads(out.read_text())["scenarios"][0]["checks"]}
    assert checks["regression"]["verdict"] == "SKIPPED"
    assert checks["contracts"]["verdict"] == "PASS"  # 30/60 hold: Wilson lower bound 0.375 >= 0.3
    # a contract scoped to a scenario with no trials judged nothing: the report says so
    cfg.write_text("checks: {fingerprint: false}\ncontracts:\n  - must_call: lookup\n    scenarios: [ss]\n")
    r = cli("gate", str(lake), "--baseline", "version=v1", "--candidate", "version=v2", "--config", str(cfg),
            "--json", str(out))
    assert r.returncode in (0, 1, 2), r.stderr
    assert any("contract 'must_call' is scoped to scenarios with no trials (ss)" in n
               for n in json.loads(out.read_text())["notes"])


def test_oracle_config_errors(tmp_path):
    lake = write_trials(tmp_path / "lake", [{"scenario": "s", "version": v, "outcome": "pass"}
                                            for v in ("v1", "v2") for _ in range(5)])
    cfg = tmp_path / "assay.yaml"
    for text, code, message in [
        ("contracts:\n  - must_call: lookupp\n", 3, "unknown tool 'lookupp'"),
        ("contracts:\n  - max_stepz: 3\n", 3, "unknown key 'max_stepz'"),
        ("contracts:\n  - max_steps: 3\noutcome_from_contracts: [nope]\n", 3, "nope"),
        ("metamorphic:\n  - relation: doc-order\n    compare: same_tool_set\n", 4, "no follow-up trials"),
    ]:
        cfg.write_text(text)
        r = cli("gate", str(lake), "--baseline", "version=v1", "--candidate", "version=v2", "--config", str(cfg))
        assert r.returncode == code, (text, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr


def test_contracts_on_the_example_agent_match_its_scripted_behaviour(agent_lakes):
    """The example's scripted policy is seeded, so which trials skip the order lookup (v2: about
    40 %) and which call the slow refund tool is known exactly: the contracts must count
    precisely those trials, scenario by scenario."""
    import sys

    from otel_assay.analyze.engine import Engine
    from otel_assay.oracles import evaluate, parse_contracts

    from .conftest import REGRESSED_TRIALS, REPO

    sys.path.insert(0, str(REPO))
    try:
        from examples import _common as C
    finally:
        sys.path.remove(str(REPO))
    expected: dict[str, dict[str, int]] = {}
    for scenario in C.SCENARIOS:
        looked_up = slow_refund = 0
        for i in range(REGRESSED_TRIALS):
            rng = C.trial_rng(1, "v2", scenario, i)  # the fixture runs the agents with seed=1
            tools = [t["tool"] for t in C.plan(scenario, "v2", rng, C.make_order_id(rng)) if "tool" in t]
            looked_up += "search_orders" in tools
            slow_refund += "issue_refund_priority" in tools
        expected[scenario] = {"must_call": looked_up, "never_call": REGRESSED_TRIALS - slow_refund}
    assert 0 < expected["refund-request"]["must_call"] < REGRESSED_TRIALS  # a real mix, not all or none

    contracts = parse_contracts([{"must_call": "search_orders"}, {"never_call": "issue_refund_priority"}])
    with Engine(agent_lakes["candidate_lake"]) as eng:
        res = evaluate(eng, contracts)
    scen = res.table.column("scenario").to_pylist()
    for scenario, want in expected.items():
        for name, count in want.items():
            got = sum(1 for s, h in zip(scen, res.holds(name)) if s == scenario and h)
            assert got == count, (scenario, name, got, count)


def test_an_inconclusive_contract_says_more_trials_would_decide(tmp_path):
    lake = write_trials(tmp_path / "lake", [{"scenario": "s", "version": v, "outcome": "pass", "tools": ["lookup"]}
                                            for v in ("v1", "v2") for _ in range(30)])
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("contracts:\n  - must_call: lookup\n")  # 30/30 hold; threshold 0.95 needs more to be sure
    out = tmp_path / "r.json"
    cli("gate", str(lake), "--baseline", "version=v1", "--candidate", "version=v2", "--config", str(cfg),
        "--json", str(out))
    c = next(c for c in json.loads(out.read_text())["scenarios"][0]["checks"] if c["name"] == "contracts")
    assert c["verdict"] == "INCONCLUSIVE"
    assert "30/30 hold, the share lies between 0." in c["reason"], c["reason"]
    assert "holds the threshold 0.95; more trials would decide" in c["reason"], c["reason"]


def test_a_baseline_without_follow_up_trials_does_not_stop_the_gate(tmp_path):
    """A stored baseline recorded before a relation was configured has no follow-ups; the
    baseline's share is only reported alongside, so the gate judges the candidate's pairs
    and says the comparison is missing (it used to exit 4). A candidate without them still
    exits 4 (test_oracle_config_errors)."""
    trials = [{"scenario": "s", "version": "v1", "outcome": "pass", "index": i} for i in range(12)]
    trials += [{"scenario": "s", "version": "v2", "outcome": "pass", "index": i} for i in range(6)]
    trials += [{"scenario": "s", "version": "v2", "outcome": "pass", "index": 6 + i, "follow_up": ("doc-order", 12 + i)}
               for i in range(6)]
    lake = write_trials(tmp_path / "lake", trials)
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("metamorphic:\n  - relation: doc-order\n    compare: same_tool_set\n")
    r = cli("gate", str(lake), "--baseline", "version=v1", "--candidate", "version=v2", "--config", str(cfg))
    assert r.returncode == 2, r.stdout + r.stderr
    text = " ".join(r.stdout.split())
    assert "metamorphic INC doc-order INCONCLUSIVE (6/6 hold" in text
    assert "judged on the candidate only, without the baseline's share alongside: baseline trials: relation " \
           "'doc-order': no follow-up trials" in text


def test_each_relation_counts_only_its_own_pairs_as_unjudged(tmp_path):
    """Two relations in one scenario: each relation's pairs were counted as the other's unjudged."""
    trials = [{"scenario": "s", "version": v, "outcome": "pass", "index": i} for v in ("v1", "v2") for i in range(8)]
    trials += [{"scenario": "s", "version": v, "outcome": "pass", "index": 8 + 8 * j + i,
                "follow_up": (rel, 8 * (v == "v2") + i)}
               for v in ("v1", "v2") for j, rel in enumerate(("a", "b")) for i in range(8)]
    lake = write_trials(tmp_path / "lake", trials)
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("checks: {fingerprint: false}\nmetamorphic:\n  - relation: a\n    compare: same_tool_set\n"
                   "  - relation: b\n    compare: same_verdict\n")
    out = tmp_path / "r.json"
    r = cli("gate", str(lake), "--baseline", "version=v1", "--candidate", "version=v2", "--config", str(cfg),
            "--json", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    c = next(c for c in json.loads(out.read_text())["scenarios"][0]["checks"] if c["name"] == "metamorphic")
    for rel in ("a", "b"):
        d = c["stats"]["metamorphic"][rel]
        assert (d["holds"], d["n"], d["unjudged"]) == (8, 8, 0), (rel, d)
        assert (d["baseline"]["holds"], d["baseline"]["n"]) == (8, 8)


def test_a_contract_that_judged_no_trial_is_named_not_dropped(tmp_path):
    """An unpriced model: max_cost_usd judges no trial. The gate left it out of the check
    without a word, as if it held."""
    lake = write_trials(tmp_path / "lake", [{"scenario": "s", "version": v, "outcome": "pass", "tools": ["lookup"]}
                                            for v in ("v1", "v2") for _ in range(10)])
    cfg = tmp_path / "assay.yaml"
    out = tmp_path / "r.json"
    for contracts, verdict, reason in (
            ("  - max_cost_usd: 1\n", "SKIPPED", "no trial could be judged by max_cost_usd (10 trials)"),
            ("  - max_cost_usd: 1\n  - must_call: lookup\n", "INCONCLUSIVE",
             "more trials would decide); no trial could be judged by max_cost_usd (10 trials)")):
        cfg.write_text("checks: {fingerprint: false}\ncontracts:\n" + contracts)
        cli("gate", str(lake), "--baseline", "version=v1", "--candidate", "version=v2", "--config", str(cfg),
            "--json", str(out))
        c = next(c for c in json.loads(out.read_text())["scenarios"][0]["checks"] if c["name"] == "contracts")
        assert c["verdict"] == verdict and reason in c["reason"], c


@pytest.mark.parametrize("config", [
    "threshold: 0.5\nchecks: {regression: false, fingerprint: false}\n",
    "checks: {regression: false, fingerprint: false}\ncontracts:\n  - max_steps: 20\n    threshold: 0.5\n",
], ids=["pass_rate", "contracts"])
def test_a_scenario_the_candidate_did_not_run_is_open_not_unjudged(tmp_path, config):
    # with pass_rate (or contracts) the only gating check, a candidate that dropped a scenario
    # deployed: pass_rate was SKIPPED "no candidate trial has an outcome", contracts absent
    trials = [{"scenario": s, "version": "v1", "outcome": "pass"} for s in ("a", "b") for _ in range(20)]
    trials += [{"scenario": "a", "version": "v2", "outcome": "pass"} for _ in range(20)]
    lake = write_trials(tmp_path / "lake", trials)
    r = run_gate(lake, parse_config(config, "x"), baseline="version=v1", candidate="version=v2")
    kind = "pass_rate" if "threshold: 0.5\nchecks" in config else "contracts"
    a, b = r.scenarios
    assert a.check(kind).verdict == "PASS"
    assert (b.check(kind).verdict, b.check(kind).gating) == ("INCONCLUSIVE", True)
    assert b.check(kind).reason == "the candidate did not run this scenario"
    assert r.decision == "manual" and r.exit_code == 2


def test_sql_contracts_in_the_gate_read_the_lake_not_other_files(tmp_path):
    """A `sql:` contract runs in a locked-down copy of the engine: the gate still judges it (and
    reads the lake after it: coverage, the reports, --emit-otel into the lake), and one that
    reads another file stops the gate with exit 3 naming it."""
    trials = [{"scenario": "s", "version": "v1", "outcome": "pass", "tools": ["lookup"], "index": i} for i in range(40)]
    trials += [{"scenario": "s", "version": "v2", "outcome": "pass", "tools": ["lookup", "search", "search"],
                "index": i} for i in range(40)]
    lake = write_trials(tmp_path / "lake", trials)
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("checks: {fingerprint: false}\ncontracts:\n  - name: few-tools\n    sql: >-\n"
                   "      (SELECT count(*) FROM steps st WHERE st.trace_id = facts.trace_id\n"
                   "       AND st.step_kind = 'tool') <= 2 AND n_tool <= 2\n")
    out = tmp_path / "r.json"
    r = cli("gate", lake, "--baseline", "version=v1", "--candidate", "version=v2", "--config", cfg,
            "--json", out, "--emit-otel", "lake")
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads(out.read_text())
    check = next(c for c in report["scenarios"][0]["checks"] if c["name"] == "contracts")
    detail = check["stats"]["contracts"]["few-tools"]
    assert check["verdict"] == "FAIL" and detail["holds"] == 0 and detail["baseline"]["holds"] == 40, check
    assert report["coverage"]["overall"] is not None and "emitted" in r.stderr
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2\n")
    cfg.write_text(f"contracts:\n  - name: peek\n    sql: \"(SELECT count(*) FROM read_csv('{secret}')) > 0\"\n")
    r = cli("gate", lake, "--baseline", "version=v1", "--candidate", "version=v2", "--config", cfg, "--json", out)
    assert r.returncode == 3 and not out.exists(), r.stdout + r.stderr
    assert "contract 'peek': its sql: expression" in r.stderr and "not other files" in r.stderr, r.stderr
