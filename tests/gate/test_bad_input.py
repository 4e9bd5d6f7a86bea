"""Bad input through the real CLI: exit 3 (usage) or 4 (data), the offending item named,
never a traceback."""

from __future__ import annotations

import os

import pytest

from .conftest import REPO, cli
from .lakes import write_trials


@pytest.fixture(scope="module")
def small_lake(tmp_path_factory):
    lake = tmp_path_factory.mktemp("small") / "lake"
    trials = [{"scenario": "s1", "version": v, "outcome": "pass" if i % 5 else "fail"}
              for v in ("v1", "v2") for i in range(10)]
    return write_trials(lake, trials)


def _check(p, code: int, *needles: str) -> None:
    assert p.returncode == code, f"exit {p.returncode}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    assert "Traceback" not in p.stderr + p.stdout
    for n in needles:
        assert n in p.stderr, p.stderr


def test_unknown_flag(small_lake):
    _check(cli("gate", small_lake, "--bogus"), 3, "--bogus")


@pytest.mark.parametrize("limit", ["banana", "1.5 gigs", "-1GB"])
def test_bad_memory_limit_is_a_usage_error(small_lake, limit):
    _check(cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v2",
               env={"OTEL_ASSAY_MEMORY_LIMIT": limit}), 3, "OTEL_ASSAY_MEMORY_LIMIT", limit)


@pytest.mark.parametrize("command", [["trials"], ["sql", "SELECT 1"], ["coverage"]])
def test_every_command_reads_the_memory_limit(small_lake, command):
    _check(cli(command[0], small_lake, *command[1:], env={"OTEL_ASSAY_MEMORY_LIMIT": "banana"}), 3,
           "OTEL_ASSAY_MEMORY_LIMIT", "banana")


def test_memory_limit_in_duckdb_spelling_is_taken(small_lake):
    p = cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v2",
            env={"OTEL_ASSAY_MEMORY_LIMIT": "800MB"})
    assert p.returncode in (0, 1, 2) and "Traceback" not in p.stderr, p.stderr


def test_too_little_memory_is_a_data_error_not_a_block(small_lake):
    # DuckDB runs out of memory mid-analysis: exit 4 with what to do, never 1 ("block")
    _check(cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v2",
               env={"OTEL_ASSAY_MEMORY_LIMIT": "1MB"}), 4, "out of memory", "OTEL_ASSAY_MEMORY_LIMIT")


def test_unknown_selector_key(small_lake):
    _check(cli("gate", small_lake, "--baseline", "versio=v1", "--candidate", "version=v2"), 3, "versio")
    # given alone, the selector is still what is wrong (not the missing other side)
    _check(cli("gate", small_lake, "--baseline", "versio=v1"), 3, "unknown selector key 'versio'")


def test_malformed_yaml_names_the_line(small_lake, tmp_path):
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("alpha: 0.05\nchecks:\n  regression: [true\n")
    _check(cli("gate", small_lake, "--config", cfg), 3, "malformed YAML", str(cfg))


def test_threshold_outside_unit_interval(small_lake, tmp_path):
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("alpha: 0.05\n\nthreshold: 1.5\n")
    _check(cli("gate", small_lake, "--config", cfg), 3, f"{cfg}:3: threshold", "(0, 1)")
    _check(cli("gate", small_lake, "--threshold", "0"), 3, "--threshold")
    # NaN passes every range comparison: it used to reach the statistics (internal error, exit 4)
    for flag in ("--threshold", "--alpha", "--delta"):
        _check(cli("gate", small_lake, flag, "nan"), 3, flag, "'nan' is not a finite number")
    _check(cli("verdict", small_lake, "--threshold", "NaN"), 3, "--threshold")


def test_unknown_config_key(small_lake, tmp_path):
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("checks:\n  regresion: true\n")
    _check(cli("gate", small_lake, "--config", cfg), 3, ":2: checks.regresion: unknown key")


def test_missing_lake(tmp_path):
    _check(cli("gate", tmp_path / "nope"), 4, "does not exist")


def test_empty_lake(tmp_path):
    (tmp_path / "lake" / "spans").mkdir(parents=True)
    _check(cli("gate", tmp_path / "lake"), 4, "empty")


def test_a_gate_that_stops_with_an_error_leaves_no_earlier_report_behind(tmp_path):
    # CI uploads whatever junit.xml is there: an earlier run's would pass for this one's
    (tmp_path / "lake" / "spans").mkdir(parents=True)
    reports = [tmp_path / "report.json", tmp_path / "junit.xml", tmp_path / "report.html"]
    for r in reports:
        r.write_text("from an earlier run")
    _check(cli("gate", tmp_path / "lake", "--json", reports[0], "--junit", reports[1], "--html", reports[2]), 4,
           "empty")
    assert not any(r.exists() for r in reports)


def test_a_bad_emit_target_leaves_no_earlier_report_behind(small_lake, tmp_path):
    # --emit-otel was checked before the earlier run's reports were removed: exit 3 with
    # those reports still there for the CI step to upload
    reports = [tmp_path / "report.json", tmp_path / "junit.xml", tmp_path / "report.html"]
    for r in reports:
        r.write_text("from an earlier run")
    _check(cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v2", "--emit-otel", "otlp://x",
               "--json", reports[0], "--junit", reports[1], "--html", reports[2]), 3, "--emit-otel")
    assert not any(r.exists() for r in reports)


def test_a_report_path_under_a_file_says_so(small_lake, tmp_path):
    # "directory x does not exist; create it first" of an x that exists (as a file)
    (tmp_path / "out").write_text("a file")
    _check(cli("gate", small_lake, "--json", tmp_path / "out" / "r.json"), 3,
           f"--json {tmp_path}/out/r.json: {tmp_path}/out is a file, not a directory")


@pytest.mark.parametrize("command", ["gate", "verdict"])
@pytest.mark.parametrize("bad", [["--html", "{tmp}/no-such-dir/report.html"], ["--html", "{tmp}/junit.xml"],
                                 ["--html", ""]])
def test_a_bad_report_path_leaves_no_earlier_report_behind(small_lake, tmp_path, command, bad):
    # the report paths were checked (exit 3) before the earlier run's reports were removed:
    # a typo in one path left the other two for the CI step to upload as this run's
    reports = [tmp_path / "report.json", tmp_path / "junit.xml"]
    config = tmp_path / "assay.yaml"
    for r in (*reports, config):
        r.write_text("from an earlier run")
    sel = ["--baseline", "version=v1", "--candidate", "version=v2"] if command == "gate" else ["--select",
                                                                                               "version=v2"]
    _check(cli(command, small_lake, *sel, "--threshold", "0.5", "--config", config, "--json", reports[0],
               "--junit", reports[1], *(b.format(tmp=tmp_path) for b in bad)), 3, "--html")
    assert not any(r.exists() for r in reports)
    # a report on the config is refused, and the config stays
    _check(cli(command, small_lake, *sel, "--config", config, "--json", f"{tmp_path}/./assay.yaml"), 3, "--config")
    assert config.read_text() == "from an earlier run"


def test_a_report_that_cannot_be_written_takes_the_others_of_this_run_with_it(small_lake, tmp_path):
    # the HTML report cannot be written (a full disk: /dev/full), after the JSON and JUnit
    # reports were: they stayed behind, saying exit_code 1 for a run that exited 3
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    reports = [tmp_path / "report.json", tmp_path / "junit.xml"]
    _check(cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v2", "--json", reports[0],
               "--junit", reports[1], "--html", "/dev/full"), 3, "cannot write the report")
    assert not any(r.exists() for r in reports)


@pytest.mark.parametrize("command", ["gate", "regress", "report", "verdict"])
@pytest.mark.parametrize("bad", [["--alpha", "2"], ["--bogus"], ["--quiet=yes"]])
def test_a_command_line_that_does_not_parse_leaves_no_earlier_report_behind(small_lake, tmp_path, command, bad):
    # click refuses these before the command runs: the earlier run's reports stayed, exit 3
    reports = [tmp_path / "report.json", tmp_path / "junit.xml", tmp_path / "report.html"]
    config = tmp_path / "assay.yaml"
    for r in (*reports, config):
        r.write_text("from an earlier run")
    _check(cli(command, small_lake, f"--json={reports[0]}", "--junit", reports[1], "--html", reports[2],
               "--config", config, *bad), 3)
    assert not any(r.exists() for r in reports)
    # a report path that is the config, however it is spelt, is never removed
    _check(cli(command, small_lake, "--json", f"{tmp_path}/./assay.yaml", "--config", config, *bad), 3)
    assert config.read_text() == "from an earlier run"


def test_selector_matching_nothing_lists_what_is_there(small_lake):
    _check(cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v9"), 4,
           "no trials match version=v9", "v1 (10)", "v2 (10)")


@pytest.mark.parametrize("flag", ["--baseline", "--candidate"])
def test_a_lone_selector_matching_nothing_lists_what_is_there(small_lake, tmp_path, flag):
    # the other arm cannot be inferred either, but the selector that matches nothing is the mistake
    _check(cli("gate", small_lake, flag, "version=v9"), 4, "no trials match version=v9", "v1 (10)", "v2 (10)")
    lake = write_trials(tmp_path / "lake", [{"scenario": "s", "version": v, "outcome": "pass"} for v in "abc"])
    _check(cli("gate", lake, flag, "version=a"), 3, "--baseline", "a (1 trials)")


def test_corrupt_parquet(small_lake, tmp_path):
    import shutil

    lake = tmp_path / "lake"
    shutil.copytree(small_lake, lake)
    victim = sorted(lake.glob("spans/**/*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:300])
    _check(cli("gate", lake), 4, victim.name)


def test_spans_but_no_trials(tmp_path):
    lake = write_trials(tmp_path / "lake", [{"scenario": None} for _ in range(3)])
    _check(cli("gate", lake), 4, "no trials", "3 traces")


def test_ambiguous_versions_need_selectors(tmp_path):
    lake = write_trials(tmp_path / "lake", [{"scenario": "s", "version": v, "outcome": "pass"}
                                            for v in ("a", "b", "c")])
    _check(cli("gate", lake), 3, "--baseline", "a (1 trials)")


def test_overlapping_selections(small_lake):
    _check(cli("gate", small_lake, "--baseline", "scenario=s1", "--candidate", "version=v2"), 3, "share 10 trials")


@pytest.mark.parametrize("flag", ["--json", "--junit", "--html"])
def test_a_report_path_that_cannot_be_written_is_refused_before_the_analysis(small_lake, tmp_path, flag):
    _check(cli("gate", small_lake, flag, tmp_path / "no-such-dir" / "r.out"), 3, flag, "does not exist")
    for path in ("-", ""):  # not stdout, not "no report": a report CI expects would silently go missing
        _check(cli("gate", small_lake, flag, path), 3, flag, "give a file path")


def test_a_report_on_the_config_or_on_another_report_is_refused(small_lake, tmp_path):
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("alpha: 0.05\n")
    _check(cli("gate", small_lake, "--config", cfg, "--json", f"{tmp_path}/./assay.yaml"), 3, "--json",
           "also the file of --config")
    assert cfg.read_text() == "alpha: 0.05\n"  # the config is not replaced by a report
    _check(cli("verdict", small_lake, "--threshold", "0.5", "--json", tmp_path / "r", "--html", tmp_path / "r"), 3,
           "--html", "also the file of --json")


def test_init_refuses_to_overwrite(tmp_path):
    p = tmp_path / "assay.yaml"
    assert cli("init", p).returncode == 0
    _check(cli("init", p), 3, "--force")


def test_init_prints_a_command_that_pastes_into_a_shell(tmp_path):
    import shlex

    p = tmp_path / "my configs" / "it's.yaml"
    p.parent.mkdir()
    out = cli("init", p).stdout
    assert shlex.split(out.split("use it with: ", 1)[1])[-1] == str(p)


def test_emitting_into_a_lake_given_as_a_glob_is_refused(small_lake):
    glob = f"{small_lake}/spans/**/*.parquet"
    _check(cli("gate", glob, "--baseline", "version=v1", "--candidate", "version=v2", "--emit-otel", "lake"), 3,
           "is not one")
    assert not [p for p in (small_lake / "spans").iterdir() if "*" in p.name]  # no directory named after the glob


def test_repeated_selectors_all_hold(small_lake):
    """--candidate version=v2 --candidate scenario=nope is both conditions, not the last one."""
    ok = cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v2", "--candidate", "scenario=s1")
    assert ok.returncode in (0, 1, 2) and "Traceback" not in ok.stderr, ok.stderr
    assert "version=v2,scenario=s1" in ok.stdout
    _check(cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v2", "--candidate",
               "scenario=nope"), 4, "version=v2,scenario=nope")


def test_a_non_finite_cost_in_one_span_does_not_stop_the_gate(tmp_path):
    """An llm.cost.total of NaN or infinity is span data: the cost features leave the
    fingerprint test (with a note) instead of an internal error."""
    for bad in (float("nan"), float("inf")):
        lake = write_trials(tmp_path / f"lake-{bad}", [
            {"scenario": "s1", "version": v, "outcome": "pass", "index": i, "cost": bad if (v, i) == ("v1", 3) else 0.01}
            for v in ("v1", "v2") for i in range(8)])
        p = cli("gate", lake, "--baseline", "version=v1", "--candidate", "version=v2")
        assert p.returncode in (0, 2), p.stdout + p.stderr
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
        text = " ".join(p.stdout.split())
        assert "not finite numbers (NaN or infinity in the spans): cost_usd, cost_per_step" in text
        assert "fingerprint PASS" in text


def test_the_unpriced_cost_note_names_only_what_the_gate_accepts(tmp_path):
    """The note on cost features left out pointed at --prices, an option the gate does not
    have (passing it is a usage error); OTEL_ASSAY_PRICES is what works there."""
    lake = write_trials(tmp_path / "lake", [{"scenario": "s1", "version": v, "outcome": "pass", "index": i}
                                            for v in ("v1", "v2") for i in range(8)])
    p = cli("gate", lake, "--baseline", "version=v1", "--candidate", "version=v2")
    text = " ".join(p.stdout.split())
    assert "fingerprint features left out for missing values: cost_usd, cost_per_step" in text, text
    assert "OTEL_ASSAY_PRICES" in text and "see --prices" not in text
    assert cli("gate", lake, "--prices", "x.csv").returncode == 3  # still no such option


def test_excluding_every_fingerprint_feature_is_inconclusive_not_a_crash(small_lake, tmp_path):
    from otel_assay.analyze.engine import Engine
    from otel_assay.analyze.fingerprint import fingerprint_matrix

    with Engine(small_lake) as eng:
        names = [n for n in fingerprint_matrix(eng).column_names if n not in ("trace_id", "scenario", "version", "run_id")]
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("fingerprint:\n  exclude: [" + ", ".join(f'"{n}"' for n in names) + "]\n")
    p = cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v2", "--config", cfg)
    _check(p, 2)
    assert "no fingerprint feature is left to compare" in " ".join(p.stdout.split())


def test_a_misspelt_fingerprint_exclusion_is_noted(small_lake, tmp_path):
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("fingerprint:\n  exclude: [latency, latency_s]\n")
    p = cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v2", "--config", cfg)
    assert p.returncode in (0, 1, 2) and "Traceback" not in p.stderr, p.stderr
    assert "fingerprint.exclude names no fingerprint feature: latency (features: n_steps" in " ".join(p.stdout.split())


def test_a_baseline_lake_that_is_the_lake_is_read_as_one_lake(small_lake):
    """--baseline-lake LAKE used to compare every trial of the lake with itself (Fisher p=1,
    "manual"); now it is the one lake: two versions compare as without the option, and
    overlapping selections are refused."""
    p = cli("gate", small_lake, "--baseline-lake", f"{small_lake}/", "-q")
    assert p.returncode in (0, 1, 2), p.stderr
    plain = cli("gate", small_lake, "-q")
    assert p.stdout == plain.stdout
    full = cli("gate", small_lake, "--baseline-lake", small_lake)
    assert "candidate version=v2: 10 trials" in full.stdout and "baseline  version=v1: 10 trials" in full.stdout
    _check(cli("gate", small_lake, "--baseline-lake", small_lake, "--baseline", "scenario=s1", "--candidate",
               "version=v2"), 3, "share 10 trials")


def test_a_baseline_lake_that_holds_the_candidates_trials_is_refused(small_lake, tmp_path):
    import shutil

    copy = tmp_path / "stored-baseline"
    shutil.copytree(small_lake, copy)
    _check(cli("gate", small_lake, "--baseline-lake", copy), 3, "share 20 trials (the same trace ids)")
    ok = cli("gate", small_lake, "--baseline-lake", copy, "--baseline", "version=v1", "--candidate", "version=v2")
    assert ok.returncode in (0, 1, 2) and "Traceback" not in ok.stderr, ok.stderr


def test_verdict_says_the_pass_rate_check_is_off_not_that_there_is_no_threshold(small_lake, tmp_path):
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("threshold: 0.5\nchecks: {pass_rate: false}\n")
    p = cli("verdict", small_lake, "--select", "version=v2", "--config", cfg)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "turned off for this scenario (checks.pass_rate: false" in p.stdout
    assert "no threshold" not in p.stdout


def test_a_deploy_does_not_count_scenarios_whose_checks_are_all_off(tmp_path):
    lake = write_trials(tmp_path / "lake", [{"scenario": s, "version": v, "outcome": "pass", "index": i}
                                            for s in ("s1", "quiet") for v in ("v1", "v2") for i in range(10)])
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("delta: 0.5\nscenarios:\n  quiet: {checks: {regression: false, fingerprint: false}}\n")
    p = cli("gate", lake, "--config", cfg)
    assert p.returncode == 0, p.stdout + p.stderr
    text = " ".join(p.stdout.split())
    assert "every check passed in 1 scenario; 1 scenario had no check that gates: quiet" in text


def test_a_verdict_on_several_versions_at_once_is_refused(small_lake):
    """`verdict LAKE --threshold θ` without version=... pooled v1 and v2 into one pass rate,
    a verdict about neither version."""
    _check(cli("verdict", small_lake, "--threshold", "0.5"), 3, "2 versions: v1 (10 trials), v2 (10 trials)",
           "--select version=v2")
    _check(cli("verdict", small_lake, "--threshold", "0.5", "--select", "scenario=s1"), 3, "add version=")
    ok = cli("verdict", small_lake, "--threshold", "0.5", "--select", "version=v2")
    assert ok.returncode in (0, 1, 2) and "Traceback" not in ok.stderr, ok.stderr


@pytest.mark.parametrize("target", ["http://", "http://[::1", "http://collector:port/v1/traces", "otlp://x"])
def test_an_emit_target_that_is_not_a_url_is_refused_before_the_analysis(small_lake, target):
    # it used to pass the check, run the whole analysis and end in a warning
    _check(cli("gate", small_lake, "--baseline", "version=v1", "--candidate", "version=v2", "--emit-otel", target), 3,
           "--emit-otel", "use `lake` or an OTLP/HTTP URL")


def test_token_features_without_reported_usage_are_left_out_with_their_own_reason(tmp_path):
    """total_tokens is NULL for a trial whose LLM calls report no usage (it read 0, and an
    output-only report read 0 too): the gate leaves the token features out and says why,
    not with the hint for cost."""
    lake = write_trials(tmp_path / "lake", [{"scenario": "s1", "version": v, "outcome": "pass", "index": i,
                                             "usage": i % 2 == 0} for v in ("v1", "v2") for i in range(8)])
    p = cli("gate", lake, "--baseline", "version=v1", "--candidate", "version=v2")
    assert p.returncode in (0, 2) and "Traceback" not in p.stderr, p.stdout + p.stderr
    text = " ".join(p.stdout.split())
    assert ("fingerprint features left out for missing values: total_tokens, tokens_per_step, cost_usd, "
            "cost_per_step") in text, text
    assert "token counts need LLM calls that report gen_ai.usage.input_tokens or output_tokens" in text, text


# 9 aliases of 9 aliases, nine levels deep: under 400 bytes standing for 9**9 (387 million) values
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [*{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}]\n"
    for a, b in zip("abcdefgh", "bcdefghi"))


def _bounded(args, tmp_path):
    """The real CLI with at most 2 GiB of address space and 60 s: the bomb took 3.2 GB."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([sys.executable, "-m", "otel_assay", *map(str, args)], capture_output=True, text=True,
                          timeout=60, env=env, stdin=subprocess.DEVNULL, cwd=REPO, preexec_fn=limit)


@pytest.mark.parametrize("command", ["gate", "contracts", "metamorphic", "run", "mutate"])
def test_a_yaml_alias_bomb_is_a_usage_error_in_bounded_memory(small_lake, tmp_path, command):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 400
    args = {"gate": ["gate", small_lake, "--config", bomb, "--baseline", "version=v1", "--candidate", "version=v2"],
            "contracts": ["contracts", small_lake, "--config", bomb],
            "metamorphic": ["metamorphic", small_lake, "--config", bomb],
            "run": ["run", bomb, "--agent", "tests.live.agents:good", "--version", "v", "--dir", tmp_path / "l"],
            "mutate": ["mutate", tmp_path / "s.yaml", "--factory", "tests.live.agents:good", "--config", bomb,
                       "--dir", tmp_path / "l"]}[command]
    (tmp_path / "s.yaml").write_text("scenarios:\n  - {name: a, input: x, properties: {expected: billing}}\n")
    p = _bounded(args, tmp_path)
    _check(p, 3, "bomb.yaml", "YAML aliases (*name) would expand this file by")
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_yaml_alias_that_contains_itself_is_a_usage_error(small_lake, tmp_path):
    cfg = tmp_path / "loop.yaml"
    cfg.write_text("contracts: &c\n  - max_steps: 3\n  - *c\n")
    _check(_bounded(["contracts", small_lake, "--config", cfg], tmp_path), 3,
           "a YAML alias refers to the value that contains it")


def test_aliases_within_the_budget_still_work(small_lake, tmp_path):
    cfg = tmp_path / "assay.yaml"
    cfg.write_text("scenarios:\n  s1: &strict {threshold: 0.5, delta: 0.2}\n  s2: *strict\n"
                   "contracts:\n  - &steps {max_steps: 30, name: short}\n  - <<: *steps\n    name: also-short\n")
    p = cli("gate", small_lake, "--config", cfg, "--baseline", "version=v1", "--candidate", "version=v2")
    assert p.returncode in (0, 1, 2) and "Traceback" not in p.stderr, p.stderr
    p = cli("contracts", small_lake, "--config", cfg, "--format", "json")
    assert p.returncode in (0, 1, 2), p.stderr
    import json
    assert sorted(r["contract"] for r in json.loads(p.stdout)) == ["also-short", "also-short", "short", "short"]
