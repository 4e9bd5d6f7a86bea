"""What opening a lake needs to know of each file, kept between opens in ``LAKE/_inventory.json``.

Before it reads anything, an analysis checks every file of the lake: that it is a
readable Parquet file of its table, with which columns (files of one layout are read
faster), and how large its data is. That costs a footer read per file, about 0.8 ms: on a
lake of 1,000 files most of what `otel-assay trials` took before computing anything. The
inventory keeps those facts per file, so that an open reads only the footers of files it
has not seen.

Why this is safe with writers at work:

- The inventory never says which files the lake holds: every open lists the lake afresh
  (Lake.live_files), so files that import, collect or compact added or removed since are
  seen or not seen exactly as without an inventory. Nothing has to invalidate it.
- It only answers for a file that is the very file it was made from: same inode, size,
  modification time and change time. Lake files are never changed in place (each is
  written under a temporary name and renamed), and a file changed in place anyway gets a
  new change time, which no one can set back (unlike the modification time).
- Only an open of the whole lake (the engine given the lake directory) reads or writes
  it: an open of part of a lake cannot tell a file gone from a file it was not asked to
  read, and a file given on its own may sit in a folder that is no lake at all.
- It is written whole under a temporary name and renamed over the old one; two readers
  writing at once leave one of the two, each correct for the files it describes. An
  inventory that cannot be read (damaged, written by someone else, of another format) is
  ignored, one that cannot be written (a read-only lake) is not written: it only saves
  time.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from .files import _DT_RE, inspect_lake_file

INVENTORY_FILE = "_inventory.json"
_FORMAT = 1
# The most an inventory may take to be read: an entry takes about 170 bytes (a file's
# name, four numbers of its stamp, its layout and size); the cap leaves 24 times that, so
# only a file that is no inventory of this lake goes over it (1,000 files: 5 MiB)
MAX_BYTES_PER_FILE = 4096
MIN_MAX_BYTES = 1 << 20


def file_facts(files: Mapping[str, Sequence[Path]], lake: Path | None = None
               ) -> dict[str, list[tuple[str | None, str | None, int]]]:
    """For each file of each table (``files``: table -> paths): (its layout, why it cannot
    be read as a lake file of that table (None if it can), the uncompressed size of its
    data); see inspect_lake_file. The layout is text: files with the same text have the
    same columns of the same types (None for a file that cannot be read).

    ``lake``: the lake directory when ``files`` are every file it holds now (the engine was
    opened on the lake itself). Its files are then answered from its inventory where it
    knows them, and the inventory is brought up to date, dropping the files not listed
    (gone, or replaced by a compaction). Any other open (a file, a glob, a list of files:
    part of a lake, or files in a folder that is no lake) reads every footer and writes
    nothing: it cannot tell which entries are gone, and a read-only command must not
    leave a file where no lake is."""
    if lake is None:
        return {table: [_inspect(Path(p), table) for p in paths] for table, paths in files.items()}
    known = _load(lake, sum(len(paths) for paths in files.values()))
    entries: dict[str, list] = {}
    out = {}
    for table, paths in files.items():
        facts_of = out[table] = []
        for p in map(Path, paths):
            if not (_DT_RE.match(p.parent.name) and p.parent.parent == lake / table):
                facts_of.append(_inspect(p, table))
                continue
            key = f"{table}/{p.parent.name}/{p.name}"
            stamp = _stamp(p)
            entry = known.get(key)
            if stamp is not None and entry is not None and entry[0] == stamp:
                facts_of.append((entry[1], None, entry[2]))
                entries[key] = entry
                continue
            facts = _inspect(p, table)
            facts_of.append(facts)
            if stamp is not None and facts[1] is None:
                entries[key] = [stamp, facts[0], facts[2]]
    if entries != known:
        _save(lake, entries)
    return out


def _inspect(path: Path, table: str) -> tuple[str | None, str | None, int]:
    schema, problem, size = inspect_lake_file(path, table)
    if schema is None:
        return None, problem, size
    # a digest of the column names and types: the inventory keeps one short text per file
    layout = hashlib.sha256(json.dumps([[f.name, str(f.type)] for f in schema]).encode()).hexdigest()[:32]
    return layout, problem, size


def _stamp(path: Path) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _load(root: Path, n_files: int) -> dict[str, list]:
    """The inventory's entries, {} when there is none or it cannot be used.

    It is read only when it is a regular file of at most MAX_BYTES_PER_FILE per file the
    lake lists now (plus MIN_MAX_BYTES): the inventory is an ordinary file anyone with
    write access to the lake could have replaced, and a FIFO there would block every
    analysis forever, a link to /dev/zero or a huge file would read until memory runs out.
    Anything else is ignored like a damaged inventory, and replaced by the next write."""
    try:
        fd = os.open(root / INVENTORY_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            cap = MIN_MAX_BYTES + MAX_BYTES_PER_FILE * n_files
            if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
                return {}
            doc = json.loads(f.read(cap + 1))
        if doc.get("format") != _FORMAT:
            return {}
        entries = doc["files"]
        return {k: v for k, v in entries.items() if _valid(k, v)}
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return {}


def _valid(key, entry) -> bool:
    return (isinstance(key, str) and isinstance(entry, list) and len(entry) == 3
            and isinstance(entry[0], list) and len(entry[0]) == 4 and all(type(v) is int for v in entry[0])
            and isinstance(entry[1], str) and type(entry[2]) is int)


def _save(root: Path, entries: dict[str, list]) -> None:
    tmp = root / f".{INVENTORY_FILE}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"format": _FORMAT, "files": entries}, f, separators=(",", ":"))
        os.replace(tmp, root / INVENTORY_FILE)
    except BaseException as e:
        # a lake this user may read but not write (the inventory only saves time), or an
        # interrupt (Ctrl-C) while writing: no temporary file is left in the lake's root
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        if not isinstance(e, OSError):
            raise
