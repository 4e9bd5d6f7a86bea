"""The DuckDB engine: binds the SQL views in ``queries/*.sql`` to a span lake.

Read-only on the lake. The live file list is taken once when the engine opens (see
``Lake.live_files``), so a collector writing at the same time never shows a reader a
half-written file or a row twice.
"""

from __future__ import annotations

import glob as _glob
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import duckdb
import pyarrow as pa

from ..collect.lake import Lake, LakeError, check_lake_file
from ..collect.schema import TABLES

# Views are created in this order (a view may use the ones before it); any other
# queries/*.sql file follows in name order.
VIEW_ORDER = ["spans", "span_events", "span_links"]


def query_files() -> dict[str, str]:
    """The shipped view definitions: view name -> SQL text, in creation order."""
    root = resources.files("otel_assay") / "queries"
    sql = {p.name[:-4]: p.read_text() for p in root.iterdir() if p.name.endswith(".sql")}
    ordered = [v for v in VIEW_ORDER if v in sql] + sorted(v for v in sql if v not in VIEW_ORDER)
    return {v: sql[v] for v in ordered}


def _sql_list(paths: Sequence[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def resolve_sources(source: str | os.PathLike | Sequence[str | os.PathLike]) -> dict[str, list[Path]]:
    """Files per lake table for a lake directory, a list of span files, or a glob.

    Raises :class:`LakeError` when nothing usable is there.
    """
    if isinstance(source, (str, os.PathLike)):
        sources = [source]
    else:
        sources = list(source)
    files: dict[str, list[Path]] = {t: [] for t in TABLES}
    for src in sources:
        p = Path(src)
        if p.is_dir():
            lake = Lake(p)
            if not any((p / t).is_dir() for t in TABLES):
                raise LakeError(f"{p} is not a span lake (no spans/ directory); "
                                "point at the directory given to `otel-assay collect --dir` or OTEL_ASSAY_DIR")
            for t in TABLES:
                files[t].extend(lake.live_files(t))
        elif p.is_file():
            files["spans"].append(p)
        elif any(ch in str(src) for ch in "*?["):
            matched = sorted(Path(m) for m in _glob.glob(str(src), recursive=True))
            if not matched:
                raise LakeError(f"no files match {src}")
            files["spans"].extend(m for m in matched if m.is_file())
        else:
            raise LakeError(f"{src} does not exist; give a lake directory, a Parquet file or a glob")
    return files


class Engine:
    """A DuckDB connection with the lake's tables and the views of ``queries/*.sql``.

    >>> with Engine("traces") as eng:
    ...     eng.query("SELECT count(*) FROM spans").to_pylist()
    """

    def __init__(self, source, *, threads: int | None = None, memory_limit: str | None = None):
        self.files = resolve_sources(source)
        self.con = duckdb.connect()
        if threads:
            self.con.execute(f"SET threads = {int(threads)}")
        if memory_limit:
            self.con.execute("SET memory_limit = ?", [memory_limit])
        self._check_files()
        for table, schema in TABLES.items():
            self._bind_table(table, schema)
        for view, sql in query_files().items():
            try:
                self.con.execute(sql)
            except duckdb.Error as e:
                raise RuntimeError(f"queries/{view}.sql failed to bind: {e}") from e

    def _check_files(self) -> None:
        bad = []
        for table, paths in self.files.items():
            for p in paths:
                problem = check_lake_file(p, table)
                if problem:
                    bad.append(f"{p}: {problem}")
        if bad:
            more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
            raise LakeError("unreadable files in the lake:\n  " + "\n  ".join(bad[:5]) + more +
                            "\nmove them out of the lake (or restore them from a backup) and run again")

    def _bind_table(self, table: str, schema: pa.Schema) -> None:
        paths = self.files[table]
        name = f"lake_{table}"
        if paths:
            self.con.execute(
                f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet({_sql_list(paths)}, "
                "union_by_name = true, hive_partitioning = true)"
            )
            # files from other writers may lack the dt= directory (a bare Parquet file)
            cols = {r[0] for r in self.con.execute(f"DESCRIBE {name}").fetchall()}
            if "dt" not in cols:
                self.con.execute(
                    f"CREATE OR REPLACE VIEW {name} AS SELECT *, NULL::DATE AS dt FROM read_parquet("
                    f"{_sql_list(paths)}, union_by_name = true)"
                )
        else:
            empty = schema.empty_table().append_column("dt", pa.array([], pa.date32()))
            self.con.register(f"_{name}_empty", empty)
            self.con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _{name}_empty")

    def lock_down(self) -> None:
        """Forbid file access beyond the bound lake files, for running a user's SQL.

        After this, SQL can still read the views but cannot read or write other files,
        attach databases or change the setting back.
        """
        dirs = sorted({str(p.parent) + os.sep for paths in self.files.values() for p in paths})
        if dirs:
            self.con.execute("SET allowed_directories = ?", [dirs])
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")

    @property
    def n_files(self) -> int:
        return sum(len(v) for v in self.files.values())

    def query(self, sql: str, params: Sequence[Any] | dict | None = None) -> pa.Table:
        """Run SQL over the views and return an Arrow table."""
        return self.con.sql(sql, params=params or None).to_arrow_table()

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_SELECT_RE = re.compile(r"^\s*(WITH|SELECT|FROM|DESCRIBE|SHOW|SUMMARIZE|EXPLAIN|PIVOT|VALUES|TABLE)\b", re.I)


def is_read_only_sql(sql: str) -> bool:
    """Whether ``sql`` is a single read-only statement (what ``otel-assay sql`` accepts)."""
    return bool(_SELECT_RE.match(sql))
