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


@pytest.mark.parametrize("text", ["pairing: off\n", "pairing: 'off'\n", "pairing: false\n"])
def test_pairing_off_as_documented(text):
    """YAML 1.1 reads the documented `pairing: off` as false, which was refused as "must be
    auto or off, got False"."""
    assert parse_config(text, "x.yaml").pairing == "off"


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
    ("fingerprint:\n  block_any_shift: yes please\n", "fingerprint.block_any_shift: must be true or false"),
    ("coverage:\n  weights: {tool: -1}\n", "coverage.weights.tool: must be a number >= 0"),
    ("coverage:\n  weights: {speed: 1}\n", "coverage.weights.speed: unknown key"),
    ("scenarios:\n  s1:\n    alpha: 0.1\n", "x.yaml:3: scenarios.s1.alpha: alpha is suite-wide"),
    ("scenarios:\n  s1:\n    threshold: 2\n", "x.yaml:3: scenarios.s1.threshold"),
    ("contracts:\n  - no_pii\n", "x.yaml:2: contracts[1]: expected a mapping"),
    # the line of the contract that is wrong, not of the `contracts:` key
    ("contracts:\n  - max_steps: 12\n  - must_call: [a]\n    threshold: 7\n",
     "x.yaml:3: contracts[2] (must_call): threshold must be"),
    ("metamorphic:\n  - relation: a\n    compare: same_tool_set\n  - relation: b\n    compare: nope\n",
     "x.yaml:4: metamorphic[2]: compare"),
    # PyYAML (YAML 1.1) reads 1e-3 as text: say so, not only "must be a number"
    ("alpha: 1e-3\n", "got '1e-3' (text, not a number: write it with a decimal point, e.g. 0.001"),
    ("coverage:\n  weights: {tool: 0, path: 0, state: 0, boundary: 0, model: 0}\n",
     "x.yaml:2: coverage.weights: every weight is 0"),
    ("contracts:\n  - max_steps: 12\noutcome_from_contracts: []\n",
     "outcome_from_contracts: is empty; list the contracts a passing trial must meet (configured: max_steps)"),
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


def test_command_line_thresholds_beat_per_scenario_ones_too(tmp_path):
    from otel_assay.cli.gate import _config

    path = tmp_path / "assay.yaml"
    path.write_text("threshold: 0.8\ndelta: 0.1\nscenarios:\n  hard:\n    threshold: 0.6\n    delta: 0.2\n"
                    "    beta: 0.2\n")
    hard = _config(str(path), threshold=0.9, delta=0.05).for_scenario("hard")
    assert (hard.threshold, hard.delta, hard.beta) == (0.9, 0.05, 0.2)  # beta has no flag: the file's stays
    hard = _config(str(path)).for_scenario("hard")
    assert (hard.threshold, hard.delta) == (0.6, 0.2)


def test_ci_example_is_valid():
    from pathlib import Path

    import yaml

    from otel_assay.gate import load_config

    ci = Path(__file__).resolve().parents[2] / "examples" / "ci"
    workflow = yaml.safe_load((ci / "github-actions.yml").read_text())
    assert "otel-assay gate" in str(workflow["jobs"]["gate"]["steps"])
    assert load_config(ci / "assay.yaml").exclude_features == ("latency_s",)


def test_ci_example_may_download_the_stored_baseline():
    """A workflow that lists its permissions gets none it does not list: the step that fetches
    the baseline lake from a run on main goes through the Actions API (list runs, download an
    artifact), which needs `actions: read`; without it the PR's gate never ran."""
    from pathlib import Path

    import yaml

    workflow = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "ci" / "github-actions.yml")
                              .read_text())
    for name, job in workflow["jobs"].items():
        if any("download-artifact" in step.get("uses", "") for step in job["steps"]):
            permissions = job.get("permissions", workflow.get("permissions"))
            if permissions is not None:  # absent: the repository's defaults, which include it
                assert permissions.get("actions") in ("read", "write"), (name, permissions)


def test_coverage_weights_not_listed_keep_their_default():
    """`weights: {boundary: 0}` leaves boundary out of the overall, not the other four (which
    made the overall undefined and every gate with min_coverage manual)."""
    from otel_assay import stats

    cfg = parse_config("coverage:\n  weights: {boundary: 0}\n", "x")
    assert cfg.coverage_weights == {"tool": 1.0, "path": 1.0, "state": 1.0, "boundary": 0.0, "model": 1.0}
    rep = stats.agent_coverage(tools_used=["a"], tools_available=["a", "b"], paths=[("a",)] * 3,
                               boundaries_tested=[], boundaries=["x"], weights=cfg.coverage_weights)
    assert rep.overall is not None and rep.overall > 0


def test_scenario_names_are_taken_as_written():
    """YAML reads `1.10:` as the float 1.1 and `on:` as true; the scenario is "1.10" / "on"."""
    cfg = parse_config("scenarios:\n  1.10:\n    threshold: 0.5\n  2024: {delta: 0.2}\n  on: {beta: 0.2}\n"
                       "  '1.20': {}\n", "x")
    assert set(cfg.scenarios) == {"1.10", "2024", "on", "1.20"}
    assert cfg.for_scenario("1.10").threshold == 0.5
    with pytest.raises(UsageError, match=r"x:3: scenarios\.1\.10\.threshold"):
        parse_config("scenarios:\n  1.10:\n    threshold: 5\n", "x")
