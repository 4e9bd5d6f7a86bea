"""otel_assay.settings: one reader per kind of value, and every OTEL_ASSAY_* name in the
package is one it lists (a variable read somewhere else would escape the one list)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from otel_assay import settings
from otel_assay.errors import UsageError

PACKAGE = Path(settings.__file__).parent


@pytest.mark.parametrize("value,expected", [
    ("1", True), ("true", True), ("TRUE", True), (" yes ", True), ("On", True),
    ("0", False), ("false", False), ("No", False), ("off", False),
])
def test_flag_spellings(monkeypatch, value, expected):
    monkeypatch.setenv(settings.PURE_PYTHON, value)
    assert settings.pure_python() is expected


def test_flag_unset_or_empty_is_the_default(monkeypatch):
    monkeypatch.delenv(settings.DISABLED, raising=False)
    assert settings.flag(settings.DISABLED, default=True) is True
    monkeypatch.setenv(settings.DISABLED, "")
    assert settings.flag(settings.DISABLED, default=True) is True


def test_flag_that_is_no_boolean_warns_and_keeps_the_default(monkeypatch, caplog):
    monkeypatch.setenv(settings.DISABLED, "sure")
    with caplog.at_level(logging.WARNING, "otel_assay.settings"):
        assert settings.disabled() is False
    assert "OTEL_ASSAY_DISABLED='sure' is not a boolean" in caplog.text


@pytest.mark.parametrize("value,expected", [("250", 250), (" 7 ", 7)])
def test_whole_numbers(monkeypatch, value, expected):
    monkeypatch.setenv(settings.FLUSH_ROWS, value)
    assert settings.flush_rows() == expected


@pytest.mark.parametrize("value", ["abc", "1.5", "0", "-3", "nan"])
def test_bad_whole_numbers_warn_and_keep_the_default(monkeypatch, caplog, value):
    monkeypatch.setenv(settings.FLUSH_ROWS, value)
    with caplog.at_level(logging.WARNING, "otel_assay.settings"):
        assert settings.flush_rows() == 100_000
    assert "OTEL_ASSAY_FLUSH_ROWS" in caplog.text


@pytest.mark.parametrize("value,expected", [("0", 0.0), ("0.25", 0.25), ("inf", 5.0), ("nan", 5.0), ("-1", 5.0)])
def test_seconds(monkeypatch, value, expected):
    monkeypatch.setenv(settings.FLUSH_SECONDS, value)
    assert settings.flush_seconds() == expected


def test_memory_limit(monkeypatch):
    monkeypatch.setenv(settings.MEMORY_LIMIT, "1.5GB")
    assert settings.memory_limit() == "1.5GB"
    monkeypatch.setenv(settings.MEMORY_LIMIT, "lots")
    with pytest.raises(UsageError, match="OTEL_ASSAY_MEMORY_LIMIT='lots' is not a memory size"):
        settings.memory_limit()
    monkeypatch.delenv(settings.MEMORY_LIMIT)
    assert settings.memory_limit("800MB") == "800MB"


def test_text_settings_strip_and_treat_empty_as_unset(monkeypatch):
    monkeypatch.setenv(settings.DIR, "  ")
    assert settings.lake_dir() == "traces"
    monkeypatch.setenv(settings.DIR, " lake ")
    assert settings.lake_dir() == "lake"
    monkeypatch.setenv(settings.EXPORTER, "OTLP")
    assert settings.exporter() == "otlp"


def test_every_variable_the_package_names_is_listed():
    listed = {name for name, _default, _what in settings.SETTINGS}
    named = set()
    for path in PACKAGE.rglob("*.py"):
        named |= set(re.findall(r"OTEL_ASSAY_[A-Z_]+[A-Z]", path.read_text(encoding="utf-8")))
    assert named, "the scan found no variable at all"
    assert named <= listed, f"not in settings.SETTINGS: {sorted(named - listed)}"


def test_no_module_but_settings_reads_an_otel_assay_variable():
    readers = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "settings.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"(environ|getenv)\S*\(?[^)\n]*OTEL_ASSAY_", line):
                readers.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert readers == []
