"""The otel-assay pytest plugin: runs ``@otel_assay.stochastic`` tests as trials.

Loaded through the ``pytest11`` entry point ``otel_assay`` (disable with ``-p no:otel_assay``).
Options: ``--assay-dir`` (span lake, default $OTEL_ASSAY_DIR or ./traces) and
``--assay-version`` (the version these trials belong to, default $OTEL_ASSAY_VERSION, else
the code state: ``default_version()``). Each stochastic test adds its statistics to ``record_property`` so
``pytest --junitxml`` carries them as ``<property>`` elements.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess

import pytest

from otel_assay import settings
from otel_assay.live.stochastic import ATTR


_VERSION_KEY = pytest.StashKey[str]()


def pytest_addoption(parser):
    group = parser.getgroup("otel-assay", "stochastic agent tests (otel-assay)")
    group.addoption("--assay-dir", default=None, help="Span lake for the trials (default $OTEL_ASSAY_DIR or ./traces).")
    group.addoption("--assay-version", default=None,
                    help="Agent version the trials belong to (default $OTEL_ASSAY_VERSION, else the git "
                         "commit, with '+<hash of the uncommitted changes>' when there are any, else 'dev').")


def default_version(cwd: str | os.PathLike | None = None) -> str:
    """The version of trials run without --assay-version or $OTEL_ASSAY_VERSION: the code
    state, so that runs of different code never share a version in the lake (one label for
    all of them would pool them in every later comparison). The git commit, plus a hash of
    the uncommitted changes (tracked files) when there are any; 'dev' outside a git checkout."""
    def git(*args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=True, timeout=10).stdout

    try:
        commit = git("rev-parse", "--short=12", "HEAD").decode().strip()
        diff = git("diff", "HEAD", "--no-ext-diff", "--binary")
    except (OSError, subprocess.SubprocessError):
        return "dev"
    return f"{commit}+{hashlib.sha256(diff).hexdigest()[:8]}" if diff else commit


def pytest_configure(config):
    config.addinivalue_line("markers", "stochastic: a test run as statistical trials by otel-assay")


def pytest_collection_modifyitems(items):
    for item in items:
        if getattr(getattr(item, "obj", None), ATTR, None) is not None:
            item.add_marker(pytest.mark.stochastic)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    spec = getattr(pyfuncitem.obj, ATTR, None)
    if spec is None:
        return None
    from otel_assay.errors import DataError, UsageError
    from otel_assay.live.stochastic import run_stochastic

    cfg = pyfuncitem.config
    lake = cfg.getoption("assay_dir") or settings.lake_dir()
    version = cfg.getoption("assay_version") or settings.version()
    if not version:
        if _VERSION_KEY not in cfg.stash:  # once per session: every test's trials are of the same code
            cfg.stash[_VERSION_KEY] = default_version(cfg.rootpath)
        version = cfg.stash[_VERSION_KEY]
    kwargs = _call_arguments(pyfuncitem)
    scenario = spec.scenario or pyfuncitem.name
    error = None
    try:
        result = run_stochastic(lambda: pyfuncitem.obj(**kwargs), spec, scenario=scenario, version=version, lake=lake)
    except (UsageError, DataError) as e:
        error = e.format_message()
    if error is not None:
        pytest.fail(f"otel-assay: {error}", pytrace=False)
    for k, v in result.properties.items():
        pyfuncitem.user_properties.append((k, v))
    msg = result.message()
    if result.verdict == "FAIL":
        pytest.fail(msg, pytrace=False)
    if result.verdict == "INCONCLUSIVE":
        pytest.skip(msg)
    pyfuncitem.add_report_section("call", "otel-assay", msg)
    return True


def _call_arguments(item) -> dict:
    """The fixture and parameter values the test function itself asks for, as pytest passes
    them. ``item.funcargs`` also holds autouse fixtures and the fixtures other fixtures
    requested, which the function does not accept; its signature names the ones it does.
    Parameters with a default are not fixtures to pytest, and are left to their default."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = inspect.signature(item.obj).parameters.values()
    return {p.name: item.funcargs[p.name] for p in params
            if p.kind in kinds and p.default is inspect.Parameter.empty and p.name in item.funcargs}


def pytest_report_teststatus(report, config):
    if report.when == "call" and report.passed:
        props = dict(report.user_properties)
        if props.get("assay_verdict") == "PASS":
            ci = f"[{props.get('assay_ci_low', 0):.2f}, {props.get('assay_ci_high', 1):.2f}]"
            return "passed", "P", f"PASSED ({props['assay_successes']}/{props['assay_trials']} trials, {ci})"
    return None
