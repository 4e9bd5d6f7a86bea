"""The DuckDB engine: binds the SQL views in ``queries/*.sql`` to a span lake.

Read-only on the lake. The live file list is taken once when the engine opens (see
``Lake.live_files``), so a collector writing at the same time never shows a reader a
half-written file or a row twice.
"""

from __future__ import annotations

import contextlib
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import duckdb
import pyarrow as pa

from .. import settings
from ..lake.files import (STEP_FILE_KEY, Lake, LakeError, cannot_read, duckdb_connect, glob_paths,
                          missing_columns_sql, parquet_schema, sql_list)
from ..lake.inventory import file_facts
from ..lake.schema import TABLES
from ..errors import UsageError, is_utf8
from .canonical import canonical_json_arrow
from .labels import LABELS_SCHEMA, label_files
from .stepfiles import STEPS_DIR, STEPS_SCHEMA, StepFile, checked_step_file, price_table_hash

# Views are created in this order (a view may use the ones before it); any other
# queries/*.sql file follows in name order.
VIEW_ORDER = [
    "spans", "span_events", "span_links",
    "model_prices", "span_kinds", "stored_steps", "steps",
    "trial_labels", "trial_facts", "trials", "pass_rates",
    "fingerprint_tools", "fingerprints",
    "decision_paths", "step_states", "abstract_states",
    "tool_definition_texts", "parsed_tool_definitions", "tool_definitions", "tool_arguments", "models_used",
    "stability", "stability_summary",
]

# Views whose result the analysis commands reuse many times: `Engine.materialize` computes
# each once into a temporary table (steps walks the span tree; doing that per query would
# re-read the lake each time; trials is read by fingerprints, coverage and pass rates).
CACHED_VIEWS = ["steps", "trials"]

# Working memory of `steps` per span, measured on the bench lake (bench/bench_views.py):
# a part of Engine._materialize_steps gets a third of DuckDB's memory limit (the rest holds
# the parts already built, and the tables and views cached beside them).
STEPS_BYTES_PER_SPAN = 1000

# The share of DuckDB's memory limit that the spans may take to be held in memory
# (Engine._hold_spans): an eighth, beside the third that a part of `steps` works in
HELD_SHARE = 8
# From how many files on the spans are held: below, what holding saves (about a millisecond
# per file and query) is not felt, and the copy only costs memory (a gate over 200k spans
# in one file peaked 60 MB higher for no time saved)
HELD_MIN_FILES = 64
# The largest average (uncompressed) size of the files whose spans are held: holding saves a
# cost per file read, the copy costs memory per byte. Measured with `otel-assay trials` on
# lakes of 100 files of 7-span trials (best of 3): files of 23 KB took 0.21 s held against
# 0.27 s read (same memory), of 210 KB 0.40 s against 0.46 s (315 MB against 278 MB); from
# 420 KB on the two took the same time within the noise (±10 %), held 60-80 MB more.
HELD_MAX_FILE_BYTES = 256 << 10

# Size of one cached `steps` row as DuckDB holds it uncompressed (about 20 text columns),
# measured on the bench lake: 10M spans gave 1.78 GB in memory and 0.6-0.75 GB spilled.
CACHED_STEP_BYTES = 320

PRICES_ENV = "OTEL_ASSAY_PRICES"
# The temp table of the trace ids an engine is scoped to (Engine.scope)
SCOPE_TABLE = "_scope"
_DT_DIR_RE = re.compile(r"^dt=\d{4}-\d{2}-\d{2}$")


def query_files() -> dict[str, str]:
    """The shipped view definitions: view name -> SQL text, in creation order."""
    root = resources.files("otel_assay") / "queries"
    sql = {p.name[:-4]: p.read_text() for p in root.iterdir() if p.name.endswith(".sql")}
    ordered = [v for v in VIEW_ORDER if v in sql] + sorted(v for v in sql if v not in VIEW_ORDER)
    return {v: sql[v] for v in ordered}


def resolve_sources(source: str | os.PathLike | Sequence[str | os.PathLike]) -> dict[str, list[Path]]:
    """Files per lake table for a lake directory, a list of span files, or a glob.

    Raises :class:`LakeError` when nothing usable is there.
    """
    if isinstance(source, (str, os.PathLike)):
        sources = [source]
    else:
        sources = list(source)
    files: dict[str, list[Path]] = {t: [] for t in TABLES}
    files["labels"] = []
    for src in sources:
        try:
            _add_source(Path(src), str(src), files)
        except OSError as e:  # a directory above it that cannot be searched
            raise LakeError(cannot_read(e.filename or src, e)) from None
    files["spans"] = _without_replaced(files["spans"])
    unreadable = [p for paths in files.values() for p in paths if not is_utf8(str(p))]
    if unreadable:
        # DuckDB takes file names as UTF-8 text: a name with other bytes cannot even be named
        more = f" (and {len(unreadable) - 3} more)" if len(unreadable) > 3 else ""
        raise LakeError("file names that are not valid UTF-8 cannot be read: " +
                        ", ".join(repr(str(p)) for p in unreadable[:3]) + more +
                        "; rename them (or the directory above them) to UTF-8 names and run again")
    return files


def _whole_lake(source) -> Path | None:
    """The lake directory when ``source`` is one (then the engine lists every file of the
    lake), else None: a file, a glob or a list of sources is part of a lake at most."""
    if isinstance(source, (str, os.PathLike)) and Path(source).is_dir():
        return Path(source)
    return None


def _add_source(p: Path, src: str, files: dict[str, list[Path]]) -> None:
    """Add the files of one source (a lake directory, a file or a glob) to ``files``."""
    if p.is_dir():
        lake = Lake(p)
        if not any((p / t).is_dir() for t in TABLES):
            hint = "point at the directory given to `otel-assay collect --dir` or OTEL_ASSAY_DIR"
            if _has_files(p):
                # a directory of span exports, the way a span file given as the lake is told
                hint += ("; span files from other exporters go into a lake first: "
                         "otel-assay import FILE... --dir LAKE, then run this on LAKE")
            raise LakeError(f"{p} is not a span lake (no spans/ directory); {hint}")
        for t in TABLES:
            files[t].extend(lake.live_files(t))
        files["labels"].extend(label_files(p))
    elif p.is_file():
        files["spans"].append(p)
    elif any(ch in src for ch in "*?["):
        matched = glob_paths(src)
        if not matched:
            raise LakeError(f"no files match {src}")
        # a glob over the whole lake (LAKE/*/dt=*/*.parquet) also matches the step files
        files_matched = [m for m in matched if m.is_file()]
        stored = {m for m in files_matched if _is_step_file(m)}
        spans = [m for m in files_matched if m not in stored]
        if stored and not spans:
            raise LakeError(f"{src} matches only step files (LAKE/steps/, stored steps, not spans); "
                            "give the lake directory or its span files (LAKE/spans/...)")
        files["spans"].extend(spans)
    else:
        raise LakeError(f"{src} does not exist; give a lake directory, a Parquet file or a glob")


def _is_step_file(path: Path) -> bool:
    """A step file of a lake (stored steps): in a steps/dt=D directory, and saying so in its
    metadata (a span file that happens to sit in such a directory is read)."""
    if not (_DT_DIR_RE.match(path.parent.name) and path.parent.parent.name == STEPS_DIR):
        return False
    schema = parquet_schema(path)[0]
    return schema is not None and STEP_FILE_KEY in (schema.metadata or {})


def _has_files(directory: Path) -> bool:
    try:
        return any(f.is_file() for f in directory.iterdir())
    except OSError:
        return False


def _without_replaced(paths: list[Path]) -> list[Path]:
    """``paths`` less the lake files that a merged file also in ``paths`` replaces.

    A glob over a lake (`traces/spans/**/*.parquet`) matches a compaction's merged file and,
    until they are deleted after the grace period, the files it replaces: every span would
    be read twice. Opening the lake by its directory does this through Lake.live_files.
    """
    # absolute: a glob run inside the table's directory (`*/*.parquet`) names no table
    full = [p.absolute() for p in paths]
    by_lake: dict[tuple[Path, str], set[Path]] = {}
    compacted: dict[Path, bool] = {}  # table directory -> whose lake has compaction records (one stat each)
    for p in full:
        tdir = p.parent.parent
        if not (_DT_DIR_RE.match(p.parent.name) and tdir.name in TABLES):
            continue
        if tdir not in compacted:
            compacted[tdir] = (tdir.parent / "_compaction").is_dir()
        if compacted[tdir]:
            by_lake.setdefault((tdir.parent, tdir.name), set()).add(p)
    hidden: set[Path] = set()
    for (root, table), present in by_lake.items():
        hidden |= Lake(root).replaced_files(table, present)
    return [p for p, a in zip(paths, full) if a not in hidden] if hidden else paths


def _bytes(size: str) -> int:
    """DuckDB's spelling of a memory size ('953.6 MiB', '3.0 GB') in bytes."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGTP]?)(i?)B\s*", size)
    if not m:
        return 1 << 62  # no limit we can read: one part, as before parts existed
    base = 1024 if m.group(3) else 1000
    return int(float(m.group(1)) * base ** " KMGTP".index(m.group(2) or " "))


# How many times in all a reader lists and opens the lake when files it listed vanish before
# it has read them (see open_engine): enough to ride out a compaction or two, and bounded, so
# that a lake rewritten faster than it can be read ends in an error instead of keeping the
# command busy for ever.
OPEN_ATTEMPTS = 4


class LakeChanged(LakeError):
    """Files listed when the lake was opened were gone before they were read."""

    def __init__(self, gone: Sequence[Path]):
        more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
        super().__init__(f"{gone[0]}{more} was removed after the lake was listed, before it was read (a compaction "
                         "with --grace-seconds 0 meanwhile?); run the command again, and give compact a grace period "
                         "longer than an analysis takes")


def open_engine(source, prepare: Callable[["Engine"], Any] | None = None, **options) -> "Engine":
    """``Engine(source, **options)`` with ``prepare(engine)`` done: the reading that a
    command does first (computing the views it reads many times, or its query).

    A reader lists the lake's files, then reads them. A compaction with no grace period
    deletes the files it merged as soon as the merged file is in place, possibly between the
    two: not damage, as a new listing finds the merged file and not the old ones. So when
    opening or ``prepare`` fails and a listed file is gone, the lake is listed and opened
    again, up to OPEN_ATTEMPTS times in all, then LakeChanged names the file. Any other error
    is raised at once.
    """
    attempt = 1
    while True:
        try:
            eng = Engine(source, **options)
        except LakeChanged:
            if attempt >= OPEN_ATTEMPTS:
                raise
        else:
            try:
                if prepare is not None:
                    prepare(eng)
                return eng
            except duckdb.Error:
                gone = eng.vanished()
                eng.close()
                if not gone:
                    raise
                if attempt >= OPEN_ATTEMPTS:
                    raise LakeChanged(gone) from None
            except BaseException:
                eng.close()
                raise
        attempt += 1


class Engine:
    """A DuckDB connection with the lake's tables and the views of ``queries/*.sql``.

    >>> with Engine("traces") as eng:
    ...     eng.query("SELECT count(*) FROM spans").to_pylist()
    """

    def __init__(self, source, *, threads: int | None = None, memory_limit: str | None = None,
                 prices: str | os.PathLike | None = None, step_files: bool = True):
        """``prices``: a price table CSV (None: OTEL_ASSAY_PRICES if set; False: the shipped
        table whatever the environment says). ``step_files=False``: compute every step from
        the spans, reading no step file (:mod:`.stepfiles`)."""
        self._options = {"threads": threads, "memory_limit": memory_limit, "prices": prices, "step_files": step_files}
        # an Engine as the source: the same files (see locked_copy), already checked
        copy = isinstance(source, Engine)
        self.files = source.files if copy else resolve_sources(source)
        # the lake directory when the engine reads the whole lake (see file_facts)
        self._lake_dir: Path | None = source._lake_dir if copy else _whole_lake(source)
        self.step_files: dict[int, StepFile] = {}
        self._con = None
        try:
            self._open(source, copy, threads, memory_limit, prices, step_files)
        except (duckdb.Error, LakeError):
            # DuckDB reports a missing file in several ways (an IO error, or a permission error
            # once locked down, where it looks for a directory of that name): gone is gone
            gone = self.vanished()
            if self._con is not None:
                self._con.close()
            if gone:
                raise LakeChanged(gone) from None
            raise

    def _open(self, source, copy: bool, threads, memory_limit, prices, step_files: bool) -> None:
        # per table: whether every file has the same columns, of the same types, in the same
        # order (_bind_table)
        self._uniform: dict[str, bool] = dict(source._uniform) if copy else {}
        # per span file, the uncompressed size of its data (see _hold_spans)
        self._span_bytes: list[int] = list(source._span_bytes) if copy else []
        self._span_files_read: list[int] | None = None  # the span files a scope reads (None: all)
        self._con = duckdb_connect(memory_limit)
        # every view and command orders explicitly, so DuckDB need not keep scan order (which
        # costs memory on large lakes)
        self._con.execute("SET preserve_insertion_order = false")
        self._con.execute("SET enable_progress_bar = false")  # it would fill CI logs with redraws
        if threads:
            self._con.execute(f"SET threads = {int(threads)}")
        self.scoped = False  # see scope()
        if not copy:
            self._check_files()
        for table, schema in TABLES.items():
            self._bind_table(table, schema)
        self._bind_labels()
        # span file index -> its step file, for the span files whose steps are stored
        self.step_files = (dict(source.step_files) if copy else self._find_step_files() if step_files else {})
        self._bind_step_files()
        self._con.create_function("canonical_json", canonical_json_arrow, ["VARCHAR"], "VARCHAR",
                                  type="arrow", side_effects=False)
        self.materialized: set[str] = set()
        self._held = False  # see _hold_spans()
        self._cached_tables: dict[str, str] = {}  # view -> the table materialize() computed it into
        self._cache_attached = False  # the compressed in-memory database of _cache
        self.steps_parts = 0  # how many parts materialize() built `steps` in (0: not built yet)
        views = query_files()
        names = list(views)
        first = names.index("steps") + 1
        # the views above `steps` wait until something reads them (see `con`)
        self._pending: dict[str, str] = {v: views[v] for v in names[first:]}
        for view in names[:first]:
            self._create_view(view, views[view])
            if view == "model_prices":
                self._bind_prices(None if prices is False else
                                  prices if prices is not None else settings.prices())
                if self.step_files:
                    # the stored costs stand when they were computed with these very prices
                    current = price_table_hash(self._con)
                    repriced = any(f.prices != current for f in self.step_files.values())
                    self._con.execute(f"CREATE OR REPLACE MACRO stored_costs_repriced() AS {str(repriced).lower()}")


    def vanished(self) -> list[Path]:
        """The files listed when the engine opened that are gone now: replaced by a compaction
        that kept no grace period (whose merged file a new listing finds)."""
        listed = [p for paths in self.files.values() for p in paths] + [f.path for f in self.step_files.values()]
        return [p for p in listed if not os.path.exists(p)]

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection, with every view of ``queries/*.sql`` on it.

        DuckDB binds a view when it is created, and binding a view binds every view it
        reads, down to the span-tree walk of `steps`: on a fresh engine the views above
        `steps` cost 0.25-0.3 s of CPU to create on a 40-trial lake, most of a small gate's
        time in DuckDB, and each of them binds `steps` and `trials` again. They are
        therefore created on first use of the connection, or by :meth:`materialize`: once
        `steps` and `trials` are cached, the views above them bind against two tables in
        0.02 s. A view reads the same rows whenever it was created.
        """
        self._create_pending_views()
        return self._con

    def _create_view(self, view: str, sql: str) -> None:
        try:
            self._con.execute(sql)
        except duckdb.IOException:
            # the lake changed under the reader (a file compacted away since it was listed): a
            # data error for the caller to report, not a view that cannot bind
            raise
        except duckdb.Error as e:
            raise RuntimeError(f"queries/{view}.sql failed to bind: {e}") from e

    def _create_pending_views(self, through: str | None = None) -> None:
        """The views not created yet, in order: all of them, or up to ``through``."""
        while self._pending:
            view = next(iter(self._pending))
            self._create_view(view, self._pending.pop(view))
            if view == through:
                return

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """:meth:`rows` for the engine's own set-up queries, which read no pending view."""
        return self._con.execute(sql, list(params)).fetchall()

    def _check_files(self) -> None:
        bad = []
        facts = file_facts({t: self.files[t] for t in TABLES}, self._lake_dir)
        for table, paths in self.files.items():
            if table not in TABLES:
                continue
            layouts = set()
            sizes = []
            for p, (layout, problem, size) in zip(paths, facts[table]):
                sizes.append(size)
                if problem:
                    bad.append(f"{p}: {problem}")
                else:
                    layouts.add(layout)
            self._uniform[table] = len(layouts) <= 1
            if table == "spans":
                self._span_bytes = sizes
        for p in self.files.get("labels", []):
            problem = parquet_schema(p)[1]
            if problem:
                bad.append(f"{p}: {problem}")
        if bad:
            more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
            sources = [p for paths in self.files.values() for p in paths]
            if sources and all(not str(p).endswith(".parquet") for p in sources):
                # a span export (OTLP JSON, protobuf) given where a lake goes
                raise LakeError("not a span lake: " + ", ".join(map(str, sources[:3])) + more +
                                "\nspan files from other exporters go into a lake first: "
                                "otel-assay import FILE... --dir LAKE, then run this on LAKE")
            raise LakeError("unreadable files in the lake:\n  " + "\n  ".join(bad[:5]) + more +
                            "\nmove them out of the lake (or restore them from a backup) and run again")

    def _bind_table(self, table: str, schema: pa.Schema, only: Sequence[int] | None = None,
                    name: str | None = None) -> None:
        """``lake_{table}`` (or ``name``) over the table's files, or over the files ``only``
        lists (indexes into ``self.files[table]``), of the traces in scope (see :meth:`scope`)."""
        paths = self.files[table]
        name = name or f"lake_{table}"
        read = paths if only is None else [paths[i] for i in only]
        # span_row: where the span sits in the lake files; a row id that every scan of the
        # same engine agrees on, so `steps` can join its narrow work back to the wide rows
        # without numbering them first (a single-threaded window over the whole lake)
        # span_file: which file (an index into self.files), for leaving out the spans whose
        # steps a step file holds: a filter on it skips those files unread. Over some of the
        # files, DuckDB's file_index counts those: it is mapped back to the lake's index
        index = "file_index" if only is None else f"[{', '.join(map(str, only))}][file_index::BIGINT + 1]"
        row = (f", ({index}::BIGINT << 40) | file_row_number AS span_row, {index}::INTEGER AS span_file"
               if table == "spans" else "")
        if read:
            # dt comes from the partition directories; a file outside one (a bare Parquet file,
            # alone or matched by a glob with the lake's files) has none, and DuckDB refuses
            # to read the two kinds together with hive_partitioning
            hive = all(_DT_DIR_RE.match(p.parent.name) for p in paths)
            # files of one layout are bound by the first file's schema; unifying them by name
            # makes DuckDB read every file's schema each time a view that reads the table is
            # bound (a lake of 1,000 small files took 12 s to open, 2 s bound by the first)
            by_name = "false" if self._uniform.get(table) else "true"
            source = (f"read_parquet({sql_list(read)}, union_by_name = {by_name}, "
                      f"hive_partitioning = {'true' if hive else 'false'})")
            # files of an older schema version or another writer may lack columns the views use
            cols = {r[0] for r in self._con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
            dt = "" if "dt" in cols else ", NULL::DATE AS dt"
            self._con.execute(
                f"CREATE OR REPLACE VIEW {name} AS SELECT *{missing_columns_sql(schema, cols)}{dt}{row} FROM {source}"
                + (f" WHERE trace_id IN (SELECT trace_id FROM {SCOPE_TABLE})" if self.scoped else ""))
        else:
            empty = schema.empty_table().append_column("dt", pa.array([], pa.date32()))
            if row:
                empty = empty.append_column("span_row", pa.array([], pa.int64()))
                empty = empty.append_column("span_file", pa.array([], pa.int32()))
            self._con.register(f"_{name}_empty", empty)
            self._con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _{name}_empty")

    def _bind_labels(self) -> None:
        paths = self.files.get("labels", [])
        if paths:
            self._con.execute(
                f"CREATE OR REPLACE VIEW lake_labels AS SELECT * FROM read_parquet({sql_list(paths)}, "
                "union_by_name = true, filename = true)"
            )
        else:
            self._con.register("_lake_labels_empty", LABELS_SCHEMA.empty_table().append_column(
                "filename", pa.array([], pa.string())))
            self._con.execute("CREATE OR REPLACE VIEW lake_labels AS SELECT * FROM _lake_labels_empty")

    def _find_step_files(self) -> dict[int, StepFile]:
        found = {}
        for i, p in enumerate(self.files["spans"]):
            step_file = checked_step_file(p)
            if step_file is not None:
                found[i] = step_file
        return found

    def _bind_step_files(self) -> None:
        """``lake_step_files`` (the stored steps, queries/stored_steps.sql), ``_split_trials``
        (trials with spans in a stored file and in another file: computed from their spans)
        and ``steps_from_spans(span_file, trace_id)``, which steps.sql asks of each span.

        The stored files are listed as constants in the macro: DuckDB then skips their
        spans without reading them (a filter through a subquery reads every file)."""
        self._con.register("_lake_step_files_empty", STEPS_SCHEMA.empty_table())
        if not self.step_files:
            self._con.execute("CREATE OR REPLACE VIEW lake_step_files AS SELECT * FROM _lake_step_files_empty")
            self._con.execute("CREATE OR REPLACE TEMP TABLE _split_trials (trace_id VARCHAR)")
            self._con.execute("CREATE OR REPLACE MACRO steps_from_spans(file, trace) AS true")
            self._con.execute("CREATE OR REPLACE MACRO stored_costs_repriced() AS false")
            return
        stored = ", ".join(str(i) for i in sorted(self.step_files))
        self._bind_stored_steps(sorted(self.step_files))
        self._con.execute(
            "CREATE OR REPLACE TEMP TABLE _split_trials AS SELECT trace_id FROM lake_spans GROUP BY trace_id "
            f"HAVING min(span_file) <> max(span_file) AND bool_or(span_file IN ({stored}))")
        split = self._rows("SELECT count(*) FROM _split_trials")[0][0]
        self._con.execute(f"CREATE OR REPLACE MACRO steps_from_spans(file, trace) AS file NOT IN ({stored})"
                         + (" OR trace IN (SELECT trace_id FROM _split_trials)" if split else ""))

    def _bind_stored_steps(self, span_files: Sequence[int], scoped: bool = False) -> None:
        """``lake_step_files`` over the step files of ``span_files`` (indexes into
        ``self.files["spans"]`` that have one), of the traces in scope when ``scoped``."""
        paths = [self.step_files[i].path for i in span_files if i in self.step_files]
        if not paths:
            self._con.execute("CREATE OR REPLACE VIEW lake_step_files AS SELECT * FROM _lake_step_files_empty")
            return
        self._con.execute(f"CREATE OR REPLACE VIEW lake_step_files AS SELECT * FROM read_parquet("
                          f"{sql_list(paths)}, hive_partitioning = false)"
                          + (f" WHERE trace_id IN (SELECT trace_id FROM {SCOPE_TABLE})" if scoped else ""))

    def _bind_prices(self, path: str | os.PathLike | None) -> None:
        """Replace the shipped price table by a user's CSV (same columns as model_prices)."""
        if path is None:
            return
        p = Path(path)
        if not p.is_file():
            # a configuration error (exit 3), not a problem with the lake's data
            raise UsageError(f"price table {p} does not exist (set by --prices or {PRICES_ENV})")
        try:
            self._con.execute(
                "CREATE OR REPLACE TEMP TABLE _model_prices AS SELECT CAST(provider AS VARCHAR) AS provider, "
                "CAST(model AS VARCHAR) AS model, CAST(input_usd_per_mtok AS DOUBLE) AS input_usd_per_mtok, "
                "CAST(output_usd_per_mtok AS DOUBLE) AS output_usd_per_mtok, NULL::VARCHAR AS vendor "
                "FROM read_csv(?, header = true, all_varchar = true)", [str(p)])
        except duckdb.Error as e:
            raise UsageError(f"price table {p} is not usable: {str(e).splitlines()[0]}; it needs a header "
                            "provider,model,input_usd_per_mtok,output_usd_per_mtok (provider may be empty)") from None
        self._con.execute("CREATE OR REPLACE VIEW model_prices AS SELECT * FROM _model_prices")

    def scope(self, predicates: Sequence[tuple[str, Sequence[Any]]], each: str = "true") -> bool:
        """Read only the traces of the trials that one of ``predicates`` holds for: every
        view then holds only those traces' rows, and `steps` is computed for them alone.

        A predicate is SQL over ``trial_facts`` (the trial's identity and outcome, which its
        spans and labels give without computing a step) with its parameters. Each view
        computes a trace's rows from that trace's spans alone, so a trace's rows in scope
        are its rows over the whole lake: a command that selects trials by a stricter
        condition afterwards (a model, which only `steps` knows) gets the rows it would
        have got unscoped, at the cost of the scoped traces only. Only the files that hold a
        scoped trace are read.

        The scope is taken only when every predicate holds for at least one trial for which
        ``each`` (SQL over ``trial_facts``) holds too, and returns whether it was: a
        selection that matches nothing reads the whole lake, as before, so that what the
        command says about the lake (its trials, the values it has) is the same. Call it
        before anything is computed; aggregates over trials (``pass_rates``, ...) then
        aggregate the scoped trials only.
        """
        if self.materialized or self.scoped or self._held:
            raise RuntimeError("scope() goes before anything is computed, once")
        self._create_pending_views(through="trial_facts")
        matches = ", ".join(f"({p}) AS m{i}" for i, (p, _) in enumerate(predicates))
        params = [v for _, ps in predicates for v in ps]
        self._con.execute(f"CREATE OR REPLACE TEMP TABLE {SCOPE_TABLE} AS SELECT trace_id, ({each}) AS counts, {matches} "
                          f"FROM trial_facts WHERE " + " OR ".join(f"({p})" for p, _ in predicates),
                          params + params).fetchall()
        found = self._rows("SELECT " + ", ".join(f"count(*) FILTER (WHERE m{i} AND counts)"
                                                 for i in range(len(predicates))) + f" FROM {SCOPE_TABLE}")[0]
        if not all(found):
            self._con.execute(f"DROP TABLE {SCOPE_TABLE}")
            return False
        files = [r[0] for r in self._rows(f"SELECT DISTINCT span_file FROM lake_spans SEMI JOIN {SCOPE_TABLE} "
                                          "USING (trace_id) ORDER BY 1")]
        self.scoped = True
        self._bind_table("spans", TABLES["spans"], only=files)
        self._span_files_read = files
        if self.step_files:
            self._bind_stored_steps(files, scoped=True)
        return True

    def unscoped(self) -> "Engine":
        """A new engine over the same files as this one, not scoped (for what the whole lake
        holds: see :meth:`scope`). The caller closes it."""
        return Engine(self, **self._options)

    def materialize(self, views: Sequence[str] = CACHED_VIEWS) -> None:
        """Compute ``views`` once into temporary tables that later queries read.

        The view keeps its name and columns; views built on it now read the table. Spans
        that arrive in the lake afterwards are not seen (the file list was fixed at open
        anyway).
        """
        if not self._held:
            self._hold_spans()
        for view in views:
            if view in self.materialized:
                continue
            if view in self._pending:
                self._create_pending_views(through=view)
            if view == "steps":
                self._materialize_steps()
            else:
                self._cache(view, f"SELECT * FROM {view}")

    def _hold_spans(self) -> None:
        """Read the spans (in scope) of many small files into memory once, when they are
        small beside the memory limit: every view computed afterwards reads them there.

        DuckDB pays about a millisecond of CPU per file each time a query reads a Parquet
        file, whatever its size (its footer, a reader per column), and computing `steps` and
        `trials` reads the spans several times: on a lake of 1,000 files of 20 spans each,
        `otel-assay trials` spent 4 of its 5 s on that. A lake of few files, or of large
        ones, is read as it is: nothing to save, and the copy costs memory and the time to
        make it. The spans of files whose steps are stored are not held either: `steps`
        skips them unread, and the other views read them from their files as before.
        """
        self._held = True
        files = range(len(self.files["spans"])) if self._span_files_read is None else self._span_files_read
        held = [i for i in files if i not in self.step_files]
        stored = [i for i in files if i in self.step_files]
        size = sum(self._span_bytes[i] for i in held if i < len(self._span_bytes))
        limit = _bytes(self._rows("SELECT current_setting('memory_limit')")[0][0])
        if (len(held) < HELD_MIN_FILES or size > limit // HELD_SHARE
                or size > HELD_MAX_FILE_BYTES * len(held)):
            return
        if stored:
            # every span file again (a filter on span_file, a constant list, skips the others
            # unread), of the traces in scope
            self._bind_table("spans", TABLES["spans"], name="_lake_spans_files")
            self._con.execute("CREATE OR REPLACE TEMP TABLE _held_spans AS SELECT * FROM _lake_spans_files "
                              f"WHERE span_file IN ({', '.join(map(str, held))})")
            self._con.execute("CREATE OR REPLACE VIEW lake_spans AS SELECT * FROM _held_spans UNION ALL "
                              f"SELECT * FROM _lake_spans_files WHERE span_file IN ({', '.join(map(str, stored))})")
        else:
            self._con.execute("CREATE OR REPLACE TEMP TABLE _held_spans AS SELECT * FROM lake_spans")
            self._con.execute("CREATE OR REPLACE VIEW lake_spans AS SELECT * FROM _held_spans")

    def restrict_trials(self, table: str) -> None:
        """Make ``trials`` (and every view built on it: pass_rates, fingerprints, stability,
        stability_summary, decision_paths) hold only the trials whose trace id is in temp
        table ``table``. The aggregating views group by scenario and version; without this a
        selector such as ``run=r1`` or ``outcome=pass`` would still be aggregated over every
        trial of the selected trials' scenario and version."""
        self.materialize(["trials"])
        self._con.execute(f"CREATE OR REPLACE VIEW trials AS SELECT * FROM {self.cached_table('trials')} "
                         f"SEMI JOIN {table} USING (trace_id)").fetchall()

    @contextlib.contextmanager
    def steps_of(self, table: str | None):
        """Inside the block, ``steps`` (and every view read from it) holds only the steps of the
        trials in temp table ``table``, when ``steps`` is materialized; otherwise nothing changes.

        A query such as ``SELECT ... FROM decision_paths SEMI JOIN table`` filters after the
        view's aggregation, which DuckDB does not push down through it: coverage of the
        candidate computed every baseline trial's decision path and states as well."""
        if table is None or "steps" not in self.materialized:
            yield
            return
        cached = self.cached_table("steps")
        self._con.execute(f"CREATE OR REPLACE VIEW steps AS SELECT * FROM {cached} SEMI JOIN {table} USING (trace_id)")
        try:
            yield
        finally:
            self._con.execute(f"CREATE OR REPLACE VIEW steps AS SELECT * FROM {cached}")

    def cached_table(self, view: str) -> str:
        """The table that materialize() computed ``view`` into."""
        return self._cached_tables[view]

    def _cache(self, view: str, query: str, params: Sequence[Any] = (),
               more: Sequence[tuple[str, Sequence[Any]]] = (), compress: bool = False,
               plus: str | None = None) -> None:
        """``view`` into a table: the rows of ``query``, then of each of ``more``. The view
        reads the table only once every query has run: one that fails (out of memory) or is
        interrupted leaves the view computing from the lake, not reading part of its rows.

        ``compress``: for a table that would take a good part of the memory limit. A
        temporary table is held uncompressed, and past the limit it spills to disk, where
        every later query reads it back (10M spans: 2.4 GB of `steps`, a third of it
        spilled). An in-memory database attached with COMPRESS compresses what a CHECKPOINT
        writes: the same rows took 380 MB, and reading them is cheaper than reading spilled
        blocks. The checkpoint costs about 0.7 s per million rows, more than it saves on a
        table that fits in memory, so small tables stay temporary tables.

        ``plus``: a view whose rows the view also holds, read as they are (stored steps)."""
        if compress and not self._cache_attached:
            self._con.execute("ATTACH ':memory:' AS _assay_cache (COMPRESS)")
            self._cache_attached = True
        table = f"_assay_cache._cached_{view}" if compress else f"temp._cached_{view}"
        other = f"temp._cached_{view}" if compress else f"_assay_cache._cached_{view}"
        if self._cache_attached:  # the other kind, left by an earlier build under another memory limit
            self._con.execute(f"DROP TABLE IF EXISTS {other}")
        statements = [(f"CREATE OR REPLACE {'' if compress else 'TEMP '}TABLE {table} AS {query}", params),
                      *((f"INSERT INTO {table} {q}", p) for q, p in more)]
        for statement, p in statements:
            self._con.execute(statement, list(p)).fetchall()
            if compress:  # each part is compressed as soon as it is in: one part is ever held raw
                self._con.execute("CHECKPOINT _assay_cache")
        if plus:
            self._con.execute(f"CREATE OR REPLACE TEMP VIEW _cached_{view}_all AS "
                             f"SELECT * FROM {table} UNION ALL SELECT * FROM {plus}")
            table = f"_cached_{view}_all"
        self._con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {table}").fetchall()
        self._cached_tables[view] = table
        self.materialized.add(view)

    def _materialize_steps(self) -> None:
        """`steps` in parts of whole trials on a large lake, so that its working set stays
        bounded: the tree walk and the dedupe hold their rows in memory and cannot spill.

        Each part is a trace-id range. Lake files are sorted by trace id, so in a large
        (compacted) file a part skips the row groups outside its range; small files that
        each cover every trace id are filtered whole by every part (about 7 % more time per
        extra part, measured on a 1M-span lake of 16 interleaved files).
        """
        # only the spans whose steps no step file holds are computed (and cached)
        n, n_no_trace = self._rows("SELECT count(*), count(*) FILTER (WHERE trace_id IS NULL) FROM lake_spans "
                                  "WHERE steps_from_spans(span_file, trace_id)")[0]
        limit = _bytes(self._rows("SELECT current_setting('memory_limit')")[0][0])
        parts = -(-n // max(1, limit // 3 // STEPS_BYTES_PER_SPAN))
        # every span is at most one step: the bound is close, most spans of a lake are steps
        compress = n * CACHED_STEP_BYTES > limit // 3
        # stored steps are read from their files by every query: reading them is cheaper than
        # copying them into the cache (10M steps: 14 s for trials, fingerprints and coverage
        # read from the files; 19 s with a copy in a temporary table)
        stored = "stored_steps" if self.step_files else None
        # a span without a trace id belongs to no range; such a lake is done in one go
        if parts <= 1 or n_no_trace:
            self.steps_parts = 1
            self._cache("steps", "SELECT * FROM steps_between(NULL, NULL)", compress=compress, plus=stored)
            return
        # boundaries from a sample: parts come out about equal, and a range never splits a trial
        sample = sorted(r[0] for r in self._rows(
            "SELECT trace_id FROM (SELECT trace_id FROM lake_spans WHERE steps_from_spans(span_file, trace_id)) "
            "USING SAMPLE reservoir(20000 ROWS) REPEATABLE (7)"))
        bounds = [None, *sorted({sample[len(sample) * i // parts] for i in range(1, parts)}), None]
        self.steps_parts = len(bounds) - 1
        part = "SELECT * FROM steps_between(?, ?)"
        self._cache("steps", part, bounds[:2], [(part, [lo, hi]) for lo, hi in zip(bounds[1:-1], bounds[2:])],
                    compress=compress, plus=stored)

    def lock_down(self) -> None:
        """Forbid file access beyond the bound lake files, for running a user's SQL.

        After this, SQL can still read the views but cannot read or write other files,
        attach databases or change the setting back.
        """
        # the files themselves, not their directories: a directory is a prefix, so a lake given
        # as ~/spans.parquet would open every file under ~/ to the query
        self._create_pending_views()  # a view created later would be bound under the lock
        paths = sorted({str(p) for paths in [*self.files.values(), [f.path for f in self.step_files.values()]]
                        for p in paths})
        if paths:
            self._con.execute("SET allowed_paths = ?", [paths])
        self._con.execute("SET enable_external_access = false")
        self._con.execute("SET lock_configuration = true")

    def locked_copy(self, tables: Mapping[str, pa.Table] | None = None) -> "Engine":
        """A second engine over the same lake files and price table, locked down (lock_down),
        with ``tables`` as temporary tables: for running a user's SQL beside this engine.
        Locking down cannot be undone and holds for every connection to a DuckDB database, so
        this engine could not read or spill to files afterwards. Its views are computed afresh
        when a query reads them (nothing of this engine's materialize is shared)."""
        eng = Engine(self, **self._options)
        try:
            for name, table in (tables or {}).items():
                eng.con.register("_arrow_table", table)
                eng.con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM _arrow_table')
                eng.con.unregister("_arrow_table")
            eng.lock_down()
        except BaseException:
            eng.close()
            raise
        return eng

    @property
    def n_files(self) -> int:
        return sum(len(v) for v in self.files.values())

    def query(self, sql: str, params: Sequence[Any] | dict | None = None) -> pa.Table:
        """Run SQL over the views and return an Arrow table."""
        return self.con.sql(sql, params=params or None).to_arrow_table()

    def rows(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        """Run SQL and return all rows as tuples (the result is always consumed)."""
        return self.con.execute(sql, params or []).fetchall()

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# the first word of a read-only query: only to tell a typo ("selec") from a wrong query
_SELECT_RE = re.compile(r"^\s*(WITH|SELECT|FROM|DESCRIBE|SHOW|SUMMARIZE|EXPLAIN|PIVOT|UNPIVOT|VALUES|TABLE)\b", re.I)


def looks_like_select(sql: str) -> bool:
    """Whether ``sql`` starts with a read-only keyword (for error messages)."""
    return bool(_SELECT_RE.match(sql))


def _words(sql: str) -> list[tuple[int, str, Any]]:
    """``sql``'s tokens without comments: (offset, text, type)."""
    tokens = [(off, kind) for off, kind in duckdb.tokenize(sql) if kind != duckdb.token_type.comment]
    ends = [off for off, _ in tokens[1:]] + [len(sql)]
    return [(off, sql[off:end].strip(), kind) for (off, kind), end in zip(tokens, ends)]


def _explained(sql: str) -> list[str]:
    """What ``EXPLAIN [ANALYZE] [(options)] statement`` may explain: the text after
    EXPLAIN [ANALYZE], and when that starts with a parenthesis also the text after it (an
    option list and a parenthesised query both start with one)."""
    words = _words(sql)
    i = 1 + (len(words) > 1 and words[1][1].upper() in ("ANALYZE", "ANALYSE"))
    if i >= len(words):
        return []
    rest = [sql[words[i][0]:]]
    if words[i][1].startswith("("):
        depth = 0
        for j in range(i, len(words)):
            if words[j][2] == duckdb.token_type.operator:
                depth += words[j][1].count("(") - words[j][1].count(")")
            if depth <= 0 and j + 1 < len(words):
                rest.append(sql[words[j + 1][0]:])
                break
    return rest


def is_read_only_sql(sql: str) -> bool:
    """Whether ``sql`` is a single read-only statement (what ``otel-assay sql`` accepts).

    DuckDB's parser decides, not the first word: a comment may come first, and EXPLAIN
    ANALYZE runs the statement it explains (a COPY under it would write files, into the
    lake's directories too, which the locked-down engine may read).
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:
        return False
    if len(statements) != 1:
        return False
    kind = statements[0].type
    if kind == duckdb.StatementType.SELECT:
        return True
    if kind == duckdb.StatementType.MULTI:  # PIVOT: a SELECT after a CREATE TYPE in memory
        words = _words(sql)
        return bool(words) and words[0][1].upper() in ("PIVOT", "UNPIVOT")
    if kind == duckdb.StatementType.EXPLAIN:
        verdicts = []
        for inner in _explained(sql):
            try:
                duckdb.extract_statements(inner)
            except duckdb.Error:
                continue  # not how DuckDB reads it
            verdicts.append(is_read_only_sql(inner))
        return bool(verdicts) and all(verdicts)
    return False
