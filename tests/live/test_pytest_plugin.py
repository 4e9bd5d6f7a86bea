"""The pytest plugin, loaded through its pytest11 entry point, run in a subprocess (pytester)."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET

# imported before pytester snapshots sys.modules: numpy cannot be imported twice in a process
from otel_assay.analyze.engine import Engine
from otel_assay.pytest_plugin import default_version

pytest_plugins = ["pytester"]

AGENT = '''
import hashlib
import pytest
import otel_assay
from otel_assay.live.stochastic import stochastic
from otel_assay.capture.trial import current_trial


def _u(key):
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0 ** 64


def make(p):
    def agent(text):
        t = current_trial()
        with otel_assay.step("scripted-router-1", kind="llm", model="scripted-router-1") as s:
            s.usage(input_tokens=100, output_tokens=10)
        return "billing" if _u(f"{t.scenario}/{t.index}") < p else "sales"
    return agent


@pytest.fixture
def agent(request):
    return make(request.config.getoption("assay_version", None) == "v2" and P_V2 or P)
'''


def _write(pytester, body, p=0.99, p_v2=None):
    pytester.makepyfile(test_agent=AGENT.replace("P_V2", repr(p_v2 or p)).replace(
        "make(request.config.getoption(\"assay_version\", None) == \"v2\" and", "make(request.config.getoption(\"assay_version\", None) == \"v2\" and").replace(" or P)", f" or {p})") + body)


def _props(xml_path):
    root = ET.parse(xml_path).getroot()
    out = {}
    for tc in root.iter("testcase"):
        out[tc.get("name")] = {p.get("name"): p.get("value") for p in tc.iter("property")}
    return out


GOOD = '''
@stochastic(trials=50, threshold=0.85, alpha=0.05, method="sprt")
def test_ticket_routing(agent):
    return "billing" in agent("My payment failed")
'''


def test_pass_reports_interval_and_junit_properties(pytester):
    _write(pytester, GOOD, p=0.99)
    lake = pytester.path / "lake"
    r = pytester.runpytest_subprocess("--assay-dir", str(lake),
                                      "--junitxml", "out.xml", "-v")
    r.assert_outcomes(passed=1)
    assert r.ret == 0
    r.stdout.fnmatch_lines(["*test_ticket_routing PASSED (*/* trials, [[]0.*, *])*"])
    props = _props(pytester.path / "out.xml")["test_ticket_routing"]
    assert props["assay_verdict"] == "PASS" and props["assay_method"] == "sprt"
    assert int(props["assay_trials"]) < 50 and props["assay_sprt_stop"] == "boundary"
    assert float(props["assay_ci_low"]) > 0.7
    assert (lake / "spans").is_dir()


def test_fail_reports_pvalue_and_effect_size(pytester):
    _write(pytester, GOOD, p=0.3)
    r = pytester.runpytest_subprocess("--assay-dir", str(pytester.path / "lake"),
                                      "--junitxml", "out.xml")
    r.assert_outcomes(failed=1)
    assert r.ret == 1
    r.stdout.fnmatch_lines(["*FAIL: test_ticket_routing passed */* trials*p = *effect size h = -*"])
    props = _props(pytester.path / "out.xml")["test_ticket_routing"]
    assert props["assay_verdict"] == "FAIL" and float(props["assay_pvalue"]) < 0.05
    assert float(props["assay_effect_size_h"]) < 0


def test_inconclusive_is_skipped_with_trials_needed(pytester):
    body = '''
@stochastic(trials=20, threshold=0.85, alpha=0.05, method="fixed")
def test_ticket_routing(agent):
    assert agent("My payment failed") == "billing"
'''
    _write(pytester, body, p=0.85)
    r = pytester.runpytest_subprocess("--assay-dir", str(pytester.path / "lake"),
                                      "--junitxml", "out.xml", "-rs")
    r.assert_outcomes(skipped=1)
    assert r.ret == 0
    # 20 trials cannot tell 0.85 from 0.85: the count needed is past trials=20, which the hint names
    r.stdout.fnmatch_lines(["*INCONCLUSIVE: test_ticket_routing passed */20 trials*about * more trials needed, "
                            "past trials 20: raise trials to about *"])
    props = _props(pytester.path / "out.xml")["test_ticket_routing"]
    assert int(props["assay_more_trials_needed"]) > 0


def test_baseline_regression(pytester):
    body = '''
@stochastic(trials=60, threshold=0.5, alpha=0.05, delta=0.2, method="fixed", baseline="version=v1")
def test_ticket_routing(agent):
    return agent("My payment failed") == "billing"
'''
    lake = str(pytester.path / "lake")
    _write(pytester, body.replace(', baseline="version=v1"', ""), p=0.95, p_v2=0.55)
    r = pytester.runpytest_subprocess("--assay-dir", lake, "--assay-version", "v1")
    r.assert_outcomes(passed=1)
    _write(pytester, body, p=0.95, p_v2=0.55)
    # v2 still clears the 0.5 threshold, but dropped ~0.4 from v1: a regression fails the test
    r = pytester.runpytest_subprocess("--assay-dir", lake, "--assay-version", "v2",
                                      "--junitxml", "out.xml")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*vs baseline */*: regression FAIL*"])
    props = _props(pytester.path / "out.xml")["test_ticket_routing"]
    assert props["assay_regression_verdict"] == "FAIL"


def test_a_baseline_that_matches_nothing_fails_before_any_trial(pytester):
    lake = pytester.path / "lake"
    _write(pytester, GOOD)
    pytester.runpytest_subprocess("--assay-dir", str(lake), "--assay-version", "v9")  # makes the lake (v9 trials)
    _write(pytester, GOOD.replace('method="sprt")', 'method="sprt", baseline="version=v0")').replace(
        "test_ticket_routing", "test_other"))
    r = pytester.runpytest_subprocess("--assay-dir", str(lake), "--assay-version", "v10")
    assert r.ret != 0
    r.stdout.fnmatch_lines(["*version=v0*"])
    from otel_assay.analyze.engine import Engine
    with Engine(str(lake)) as eng:
        assert eng.con.execute("SELECT count(*) FROM trials WHERE version = 'v10'").fetchall() == [(0,)]


def test_plugin_disabled_runs_body_once(pytester):
    _write(pytester, GOOD + '''
CALLS = []

@stochastic(trials=50)
def test_counts(agent):
    CALLS.append(1)

def test_after():
    assert len(CALLS) == 1
''', p=0.3)
    # without the plugin the decorator is inert: each body runs once as a plain test (no trial)
    r = pytester.runpytest_subprocess("-p", "no:otel_assay", "-W", "ignore::pytest.PytestReturnNotNoneWarning")
    assert r.ret == 1  # test_ticket_routing: agent() outside a trial has no index
    r.assert_outcomes(passed=2, failed=1)


def test_usage_error_without_steps(pytester):
    _write(pytester, '''
@stochastic(trials=5, method="fixed")
def test_no_steps():
    return True
''')
    r = pytester.runpytest_subprocess("--assay-dir", str(pytester.path / "lake"))
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*none of the 5 trials counted (empty-run)*"])


def test_a_body_that_always_raises_is_an_error_with_the_exception(pytester):
    """A bug in the test body (every trial raises before any step) is not a failure rate."""
    body = '''
@stochastic(trials=8, threshold=0.85, method="fixed")
def test_typo(agent):
    return "billing" in agnet("My payment failed")
'''
    _write(pytester, body)
    r = pytester.runpytest_subprocess("--assay-dir", str(pytester.path / "lake"))
    assert r.ret != 0
    r.stdout.fnmatch_lines(["*every trial raised before recording a step*NameError: name 'agnet' is not defined*"])


def test_a_failure_message_names_the_first_exception(pytester):
    body = '''
@stochastic(trials=20, threshold=0.85, method="fixed")
def test_ticket_routing(agent):
    assert agent("My payment failed") == "billing", "routed elsewhere"
'''
    _write(pytester, body, p=0.3)
    r = pytester.runpytest_subprocess("--assay-dir", str(pytester.path / "lake"))
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*FAIL: test_ticket_routing passed */20 trials*trial(s) raised, the first: AssertionError: "
                            "routed elsewhere*"])


def test_without_a_version_the_trials_are_labelled_with_the_code_state(pytester, monkeypatch):
    """One label ('dev') for every run pooled different code in the lake; the default is now
    the git commit, with a hash of the uncommitted changes."""
    _write(pytester, GOOD, p=0.99)
    assert default_version(pytester.path) == "dev"  # not a git checkout
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "test_agent.py"], ["commit", "-q", "-m", "agent"]):
        subprocess.run(["git", *args], cwd=pytester.path, check=True, env={**os.environ, **env})
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=pytester.path, capture_output=True,
                            text=True, check=True).stdout.strip()
    assert default_version(pytester.path) == commit
    lake = pytester.path / "lake"
    monkeypatch.delenv("OTEL_ASSAY_VERSION", raising=False)
    assert pytester.runpytest_subprocess("--assay-dir", str(lake)).ret == 0
    (pytester.path / "test_agent.py").write_text((pytester.path / "test_agent.py").read_text() + "\n# changed\n")
    dirty = default_version(pytester.path)
    assert dirty.startswith(commit + "+") and len(dirty) == len(commit) + 9
    assert pytester.runpytest_subprocess("--assay-dir", str(lake)).ret == 0
    with Engine(lake) as eng:
        assert sorted(r[0] for r in eng.rows("SELECT DISTINCT version FROM trials")) == sorted([commit, dirty])
