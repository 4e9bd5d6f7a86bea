"""A lake (or an input) that cannot be listed or read in full is an error naming the path,
exit 4, in every command: never a query over part of the lake, a gate that decides on
half the trials, or an unreadable ``spans/`` taken for an empty lake.

The commands run in a fresh process that the file permissions apply to. Root reads any
file whatever its mode, so when the tests run as root the child drops the two
capabilities that let it (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) before it starts: it
stays the owner of the test's files (no need for a lake and an interpreter that another
user such as ``nobody`` can reach) and a directory of mode 000 stops it as it stops any
user. As another user, mode 000 alone does.
"""

from __future__ import annotations

import ctypes
import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from otel_assay.lake.files import LakeError, glob_paths

from .lakes import span, write_lake

REPO = Path(__file__).resolve().parents[2]
DAY_MS = 86_400_000
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def _drop_root_read_override() -> None:
    """In the child before it runs Python: take the capabilities that bypass file modes out
    of its bounding set, so the program it starts has none of them."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _run(*args, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL, cwd=REPO,
                          preexec_fn=_drop_root_read_override if os.geteuid() == 0 else None, **kw)


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """The real command line in a process that mode 000 stops; skips where no such process
    can be made (root without the right to drop capabilities, a system without prctl)."""
    if sys.platform != "linux" and os.geteuid() == 0:
        pytest.skip("as root, the tests drop capabilities with Linux's prctl")
    probe = tmp_path_factory.mktemp("probe") / "closed"
    probe.mkdir()
    probe.chmod(0)
    try:
        p = _run("-c", f"import os; os.listdir({str(probe)!r})")
    except OSError as e:
        pytest.skip(f"cannot start a process without the right to read every file: {e}")
    finally:
        probe.chmod(0o755)
    if p.returncode == 0:
        pytest.skip("a directory of mode 000 can still be listed by the test's processes")

    def _cli(*args):
        return _run("-m", "otel_assay", *args)
    return _cli


def _trial(trace: int, day: int, version: str, outcome: str) -> dict:
    attrs = {"assay.scenario": "s1", "assay.agent.version": version, "assay.trial.outcome": outcome}
    return span(trace, 1, None, "assay.trial s1", day * DAY_MS, day * DAY_MS + 10, attrs)


@pytest.fixture
def lake(tmp_path):
    """Two days of 20 trials each (v1 and v2, both days), one file per day."""
    root = tmp_path / "lake"
    for day in (0, 1):
        write_lake(root, [_trial(100 * day + i, day, "v1" if i % 2 else "v2", "pass" if i % 3 else "fail")
                          for i in range(1, 21)], token=f"day{day}")
    return root


@pytest.fixture
def closed():
    """closed(path): mode 000 on ``path`` for the rest of the test."""
    paths = []

    def _close(path: Path) -> Path:
        path.chmod(0)
        paths.append(path)
        return path
    yield _close
    for p in paths:
        p.chmod(0o755)


def _check(p, *needles: str) -> None:
    assert p.returncode == 4, f"exit {p.returncode}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    assert "Traceback" not in p.stderr + p.stdout
    for n in needles:
        assert n in p.stderr, p.stderr


GATE = ["--baseline", "version=v1", "--candidate", "version=v2"]


def test_the_whole_lake_reads_before_anything_is_closed(cli, lake):
    p = cli("sql", lake, "SELECT count(*) AS n FROM spans", "--format", "csv")
    assert p.returncode == 0 and p.stdout.split() == ["n", "40"], p.stdout + p.stderr
    assert cli("gate", lake, *GATE).returncode in (0, 1, 2)


@pytest.mark.parametrize("command", [["sql", "{lake}", "SELECT count(*) FROM spans"], ["trials", "{lake}"],
                                     ["gate", "{lake}", *GATE], ["compact", "--dir", "{lake}"],
                                     ["sql", "{lake}/spans/*/*.parquet", "SELECT count(*) FROM spans"],
                                     ["sql", "{lake}/**/*.parquet", "SELECT count(*) FROM spans"]])
def test_an_unreadable_partition_is_an_error_naming_it(cli, lake, closed, command):
    # was: half the spans (20 of 40), exit 0, and the gate decided on half the trials
    part = closed(sorted((lake / "spans").iterdir())[1])
    _check(cli(*[c.format(lake=lake) for c in command]), str(part), "Permission denied")


@pytest.mark.parametrize("command", [["sql", "{lake}", "SELECT count(*) FROM spans"], ["gate", "{lake}", *GATE]])
def test_an_unreadable_spans_directory_is_not_an_empty_lake(cli, lake, closed, command):
    # was: 0 rows, exit 0; the gate called the lake "empty"
    spans = closed(lake / "spans")
    p = cli(*[c.format(lake=lake) for c in command])
    _check(p, str(spans), "Permission denied")
    assert "empty" not in p.stderr


@pytest.mark.parametrize("where", ["_compaction", "labels"])
def test_unreadable_compaction_records_or_labels_are_an_error(cli, lake, closed, where):
    # unread compaction records would show replaced files beside their merged copy (every row
    # twice); unread labels would change the trials' scenarios and outcomes
    (lake / where).mkdir()
    closed(lake / where)
    _check(cli("trials", lake), str(lake / where), "Permission denied")


def test_a_lake_that_cannot_be_searched_is_named(cli, lake, closed):
    closed(lake)
    _check(cli("sql", lake, "SELECT count(*) FROM spans"), str(lake / "spans"), "Permission denied")


def test_compact_does_not_merge_past_an_unreadable_write_ahead_log(cli, lake, closed):
    # a segment it cannot see would have its files merged, then written again by the replay
    (lake / "_wal").mkdir()
    closed(lake / "_wal")
    _check(cli("compact", "--dir", lake), str(lake / "_wal"))


def test_import_names_a_directory_it_cannot_list(cli, tmp_path, closed):
    exports = tmp_path / "exports"
    exports.mkdir()
    (exports / "a.json").write_text('{"resourceSpans": []}')
    closed(exports)
    _check(cli("import", exports, "--dir", tmp_path / "lake"), f"cannot read {exports}: Permission denied")
    _check(cli("import", exports / "a.json", "--dir", tmp_path / "lake"), str(exports / "a.json"))


# ------------------------------------------------------------------ glob_paths is glob
_NAMES = st.sampled_from(["a", "b.parquet", ".h", "dt=1", "c.json", "[x]"])
_TREES = st.recursive(st.just(None), lambda kids: st.dictionaries(_NAMES, kids, max_size=4), max_leaves=12)
_PARTS = st.sampled_from(["*", "**", "?", "*.parquet", "dt=*", ".*", "a", "[ab]*", "[!.]*", "b.parquet", "x"])


def _make(root: Path, tree) -> None:
    for name, kid in (tree or {}).items():
        if kid is None:
            (root / name).write_text("")
        else:
            (root / name).mkdir()
            _make(root / name, kid)


@settings(max_examples=200, deadline=None)
@given(tree=st.dictionaries(_NAMES, _TREES, max_size=4), parts=st.lists(_PARTS, min_size=1, max_size=4),
       trailing=st.booleans())
def test_glob_paths_matches_what_glob_matches(tmp_path_factory, tree, parts, trailing):
    root = tmp_path_factory.mktemp("tree")
    _make(root, tree)
    pattern = str(root) + "/" + "/".join(parts) + ("/" if trailing else "")
    # glob's one quirk left out: "FILE/**" gives "FILE/", a file as if it were a directory
    expected = sorted({Path(p) for p in glob.glob(pattern, recursive=True) if not p.endswith("/") or os.path.isdir(p)})
    assert glob_paths(pattern) == expected


def test_glob_paths_gives_no_file_for_a_directory_pattern(tmp_path):
    (tmp_path / "b.parquet").write_text("")
    assert glob.glob(str(tmp_path / "b.parquet" / "**"), recursive=True) == [str(tmp_path / "b.parquet") + "/"]
    assert glob_paths(str(tmp_path / "b.parquet" / "**")) == []


def test_glob_paths_relative_to_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "spans" / "dt=1").mkdir(parents=True)
    (tmp_path / "spans" / "dt=1" / "part-a.parquet").write_text("")
    monkeypatch.chdir(tmp_path / "spans")
    assert glob_paths("*/*.parquet") == [Path("dt=1/part-a.parquet")]
    assert glob_paths("../spans/**/*.parquet") == [Path("../spans/dt=1/part-a.parquet")]


def test_glob_paths_raises_where_glob_is_silent(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").mkdir()
    (tmp_path / "a" / "f" / "x").symlink_to(tmp_path / "a")  # a loop: glob gives the files 40 times over
    with pytest.raises(LakeError, match="cannot read"):
        glob_paths(str(tmp_path / "**"))


def test_collect_does_not_start_on_a_write_ahead_log_it_cannot_read(cli, lake, closed):
    # a log it cannot list would be a log with nothing to replay: acknowledged spans left out.
    # Mode 300: its lock file can still be opened, only the listing fails
    (lake / "_wal").mkdir()
    closed(lake / "_wal").chmod(0o300)
    _check(cli("collect", "--dir", lake, "--grpc", "off", "--http", "127.0.0.1:0"), str(lake / "_wal"))
