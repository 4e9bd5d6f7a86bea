"""Mutation testing (paper §5) with a scripted agent whose behaviour depends on its config."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from otel_assay.errors import UsageError
from otel_assay.live.mutation import generate_mutants, run_mutation
from otel_assay.live.scenarios import parse_scenarios

from .mutation_agents import CONFIG, make_agent, pass_probability

SUITE = parse_scenarios({"name": "routing", "config": {"threshold": 0.8}, "scenarios": [
    {"name": "billing", "input": "My payment failed", "properties": {"expected": "billing"},
     "evaluator": "exact_match"}]})


def test_operators_change_one_component():
    ms = generate_mutants(CONFIG, seed=3)
    by_op = {m.operator: m for m in ms}
    assert set(by_op) == {"identity", "synonym", "reorder", "noise", "drop", "tool_remove", "tool_reorder",
                          "tool_noise", "model_swap", "model_downgrade", "context_truncate", "context_noise",
                          "context_permute"}
    for m in ms:
        changed = [f for f in ("prompt", "tools", "model", "context") if getattr(m.config, f) != getattr(CONFIG, f)]
        assert len(changed) == (0 if m.operator == "identity" else 1), (m.operator, changed)
    assert by_op["model_downgrade"].config.model == "gpt-4o-mini"
    assert by_op["model_swap"].config.model == "claude-3-5-sonnet"
    assert generate_mutants(CONFIG, seed=3) == ms                       # reproducible
    assert [m.operator for m in generate_mutants(CONFIG, ["tool"], identity=False)] == \
        ["tool_remove", "tool_reorder", "tool_noise"]                  # selective (Def. 5.9), by class
    with pytest.raises(UsageError, match="unknown mutation operator 'flip'"):
        generate_mutants(CONFIG, ["flip"])


def test_kills_equivalence_and_reproducible_score(tmp_path):
    kw = dict(seed=5, per_operator=2, original_trials=100, n_max=150, delta=0.2)
    rep = run_mutation(SUITE, make_agent, CONFIG, lake=str(tmp_path / "a"), **kw)
    p0 = pass_probability(CONFIG)
    n_changed = 0
    for r in rep.results:
        p = pass_probability(r.mutant.config)
        if abs(p - p0) >= 0.2:           # behaviour changed by at least delta: must be killed, fast
            n_changed += 1
            assert r.status == "killed", (r.mutant.id, r.mutant.description, r.reason)
            assert r.trials < 40, (r.mutant.id, r.trials)  # SPRT-accelerated kill (Def. 5.10)
        elif p == p0:                    # same behaviour: presumed equivalent (Def. 5.7)
            assert r.status == "equivalent", (r.mutant.id, r.mutant.description, r.reason)
    assert n_changed >= 4
    assert {r.mutant.operator: r.status for r in rep.results}["identity"] == "equivalent"
    c = rep.counts()
    assert rep.score == c["killed"] / (c["killed"] + c["survived"])
    assert rep.per_class["model"] == 1.0
    again = run_mutation(SUITE, make_agent, CONFIG, lake=str(tmp_path / "b"), **kw)
    assert json.dumps(again.as_dict(), sort_keys=True) == json.dumps(rep.as_dict(), sort_keys=True)


def test_mutate_cli(tmp_path):
    import yaml

    from otel_assay.cli import cli as root
    from otel_assay.cli.live import register
    if "mutate" not in root.commands:
        register(root)
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({"scenarios": [{"name": "billing", "input": "My payment failed",
                                                  "properties": {"expected": "billing"}}]}))
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(json.dumps(CONFIG.as_dict()))))
    r = CliRunner().invoke(root, ["mutate", str(sc), "--factory", "tests.live.mutation_agents:make_agent",
                                  "--config", str(cfg), "--dir", str(tmp_path / "l"), "--operators", "tool,model",
                                  "--original-trials", "60", "--json", str(tmp_path / "m.json"), "--min-score", "0.9"])
    assert r.exit_code == 0, r.output
    assert "mutation score 1.000" in r.output
    assert json.loads((tmp_path / "m.json").read_text())["score"] == 1.0
    r = CliRunner().invoke(root, ["mutate", str(sc), "--factory", "tests.live.nowhere:f", "--config", str(cfg)])
    assert r.exit_code == 3 and "--factory 'tests.live.nowhere:f'" in r.output
    # an exception in the user's factory is a usage error, not "a bug in otel-assay"
    r = CliRunner().invoke(root, ["mutate", str(sc), "--factory", "tests.live.mutation_agents:broken_factory",
                                  "--config", str(cfg), "--dir", str(tmp_path / "l2")])
    assert r.exit_code == 3, r.output
    assert "the factory raised AttributeError" in r.output and "AgentConfig" in r.output
    # an --operators list that names nothing is not "every operator"
    r = CliRunner().invoke(root, ["mutate", str(sc), "--factory", "tests.live.mutation_agents:make_agent",
                                  "--config", str(cfg), "--dir", str(tmp_path / "l3"), "--operators", ","])
    assert r.exit_code == 3 and "names no operator" in r.output, r.output
    assert not (tmp_path / "l3").exists()


def test_a_second_run_on_the_same_lake_continues_the_trial_indices(tmp_path):
    from otel_assay.analyze.engine import Engine

    kw = dict(seed=1, per_operator=1, original_trials=10, n_max=20, operators=["model"])
    lake = str(tmp_path / "lake")
    run_mutation(SUITE, make_agent, CONFIG, lake=lake, **kw)
    run_mutation(SUITE, make_agent, CONFIG, lake=lake, **kw)
    with Engine(lake) as eng:
        dup = eng.con.execute("SELECT count(*) FROM (SELECT version, scenario, trial_index FROM trials "
                              "GROUP BY ALL HAVING count(*) > 1)").fetchall()
        n = eng.con.execute("SELECT count(*) FROM trials WHERE version = 'mutation'").fetchall()
    assert dup == [(0,)] and n[0][0] >= 2 * 10


@pytest.mark.parametrize("delta", [0.5, 0.6])
def test_a_delta_the_sprt_cannot_test_does_not_make_every_mutant_equivalent(tmp_path, delta):
    # an unknown model routes with p = 0.5; removing the router drops it to 0. With delta = 0.5
    # the drop is exactly delta, and with 0.6 no SPRT can be set up at all: both used to call
    # every mutant "equivalent" after one trial (all() of no SPRT states is True)
    from dataclasses import replace

    cfg = replace(CONFIG, model="some-other-model")
    assert pass_probability(cfg) == 0.5
    rep = run_mutation(SUITE, make_agent, cfg, lake=str(tmp_path / "l"), operators=["tool_remove"],
                       original_trials=100, n_max=60, delta=delta)
    (removed,) = [r for r in rep.results if r.mutant.operator == "tool_remove"]
    assert removed.status != "equivalent", removed.reason
    assert removed.trials > 1
    if delta == 0.5:
        assert removed.status == "killed", removed.reason
