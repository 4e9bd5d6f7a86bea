"""Configuration loading and validation (no lake needed)."""

from __future__ import annotations

import pytest

from otel_assay.errors import UsageError
from otel_assay.gate import STARTER_CONFIG, GateConfig, parse_config


def test_starter_config_is_the_documented_defaults():
    cfg = parse_config(STARTER_CONFIG, "assay.yaml")
    d = cfg.as_dict()
    assert d.pop("source") == "assay.yaml"
    want = GateConfig().as_dict()
    want.pop("source")
    assert d == want
    assert (cfg.alpha, cfg.beta, cfg.delta, cfg.correction, cfg.threshold, cfg.min_coverage) == \
        (0.05, 0.10, 0.10, "holm", None, None)


def test_empty_file_gives_defaults():
    assert parse_config("", "x").alpha == 0.05


@pytest.mark.parametrize("text, needle", [
    ("alpha: 0\n", "x.yaml:1: alpha: must be in (0, 1)"),
    ("alpha: true\n", "alpha: must be a number"),
    ("delta: 0.1\nbeta: 1\n", "x.yaml:2: beta"),
    ("threshold: -0.2\n", "threshold: must be in (0, 1)"),
    ("min_coverage: 1.2\n", "min_coverage: must be in (0, 1]"),
    ("correction: fdr\n", "correction: must be one of holm"),
    ("pairing: yes\n", "pairing: must be auto or off"),
    ("checks:\n  fingerprint: 1\n", "x.yaml:2: checks.fingerprint: must be true or false"),
    ("fingerprint:\n  exclude: latency_s\n", "fingerprint.exclude: must be a list"),
    ("fingerprint:\n  permutations: 10\n", "fingerprint.permutations: must be an integer >= 99"),
    ("coverage:\n  weights: {tool: -1}\n", "coverage.weights.tool: must be a number >= 0"),
    ("coverage:\n  weights: {speed: 1}\n", "coverage.weights.speed: unknown key"),
    ("scenarios:\n  s1:\n    alpha: 0.1\n", "x.yaml:3: scenarios.s1.alpha: alpha is suite-wide"),
    ("scenarios:\n  s1:\n    threshold: 2\n", "x.yaml:3: scenarios.s1.threshold"),
    ("contracts:\n  - no_pii\n", "contracts: contracts[1]: expected a mapping"),
    ("alpha: 0.05\nalpha: 0.01\n", "x.yaml:2: alpha: duplicate key (first at line 1)"),
    ("version: 2\n", "unsupported config version"),
    ("- a\n- b\n", "must be a mapping"),
    ("alpha: [0.05\n", "malformed YAML"),
    ("!!python/object:os.system {}\n", "malformed YAML"),  # safe loading: no arbitrary objects
])
def test_errors_name_the_key_and_line(text, needle):
    with pytest.raises(UsageError) as e:
        parse_config(text, "x.yaml")
    assert needle in e.value.message
    assert e.value.exit_code == 3


def test_scenario_overrides():
    cfg = parse_config("threshold: 0.8\ndelta: 0.1\nscenarios:\n  hard:\n    threshold: 0.6\n    delta: 0.2\n"
                       "    checks: {fingerprint: false}\n", "x")
    hard, other = cfg.for_scenario("hard"), cfg.for_scenario("other")
    assert (hard.threshold, hard.delta, hard.checks["fingerprint"]) == (0.6, 0.2, False)
    assert (other.threshold, other.delta, other.checks["fingerprint"]) == (0.8, 0.1, True)


def test_ci_example_is_valid():
    from pathlib import Path

    import yaml

    from otel_assay.gate import load_config

    ci = Path(__file__).resolve().parents[2] / "examples" / "ci"
    workflow = yaml.safe_load((ci / "github-actions.yml").read_text())
    assert "otel-assay gate" in str(workflow["jobs"]["gate"]["steps"])
    assert load_config(ci / "assay.yaml").exclude_features == ("latency_s",)
