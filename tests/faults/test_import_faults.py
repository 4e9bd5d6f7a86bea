"""`otel-assay import` into a lake on a full disk: the error names the lake, not the input."""

from __future__ import annotations

import subprocess
import sys

from tests.collect.conftest import recorded_trials
from tests.collect.test_import import jsonl


def test_a_full_disk_is_reported_as_the_lake_not_as_the_input(tmp_path, faults):
    lake = tmp_path / "lake"
    faults.small_disk(lake, "1m", inodes=1000)
    f = tmp_path / "traces.jsonl"
    f.write_bytes(jsonl(recorded_trials(10)))
    with faults.full(lake):
        r = subprocess.run([sys.executable, "-m", "otel_assay", "import", str(f), "--dir", str(lake), "-q"],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "cannot write the lake: " in out and "No space left on device" in out, out
    assert "cannot read" not in r.stdout + r.stderr and "Traceback" not in r.stderr
    # space again: the same file imports whole
    r = subprocess.run([sys.executable, "-m", "otel_assay", "import", str(f), "--dir", str(lake), "-q"],
                       capture_output=True, text=True, timeout=120)
    n = len(recorded_trials(10))
    assert r.returncode == 0 and f"imported {n} spans" in r.stdout, r.stdout + r.stderr
