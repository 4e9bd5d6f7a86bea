"""A read-only SQL query over a lake's views (``otel-assay sql``).

The query may only read the lake's views. Anything else (a write, a second statement, a
statement EXPLAIN ANALYZE would execute) is refused before the lake is opened, with what is
allowed; and the engine is locked down so that the query cannot read other files either.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from ..lake.files import LakeError
from ..errors import DataError, UsageError, is_utf8
from .engine import is_read_only_sql, looks_like_select, open_engine

_ONLY = "only read-only queries (SELECT, WITH, DESCRIBE, ...) are allowed"
# DuckDB's error kinds that are not the query's fault: a lake file that cannot be read (an
# I/O error; a Parquet page DuckDB cannot decode raises the bare duckdb.Error), too little
# memory, an internal failure, Ctrl-C. Every other kind (parser, binder, conversion, invalid
# input, a transaction the read-only engine refuses, ...) is a query DuckDB cannot run.
_NOT_THE_QUERY = (duckdb.IOException, duckdb.OutOfMemoryException, duckdb.InterruptException,
                  duckdb.FatalException, duckdb.InternalException)


def _lake_failed(e: duckdb.Error) -> bool:
    """Whether ``e`` came from reading the lake's files or the machine, not from the query.
    Exit 4 with a hint to find the corrupt file sends the user hunting through a lake that
    is fine when the query was at fault; exit 3 on a corrupt file hides the damage."""
    return (isinstance(e, _NOT_THE_QUERY) or type(e) is duckdb.Error
            or "Failed to read file" in str(e))  # a corrupt page reported as invalid input


def query_lake(lake: str, query: str) -> pa.Table:
    """The result of one read-only ``query`` over the views of ``lake`` (a lake directory, a
    Parquet file or a glob). A wrong query is a UsageError, a lake that cannot be opened a
    DataError; an error reading the lake's files or of the machine (out of memory)
    propagates for the caller to report."""
    _check(query)
    result: list[pa.Table] = []

    def run(eng):  # read-only, so run again over a new listing when files vanished (open_engine)
        eng.lock_down()
        result.append(eng.query(query))

    try:
        open_engine(lake, run).close()
    except LakeError as e:
        raise DataError(str(e)) from None
    except duckdb.PermissionException as e:
        raise UsageError(f"the query may only read the lake's views: {e}") from None
    except duckdb.Error as e:
        if _lake_failed(e):
            raise
        raise UsageError(f"query failed: {str(e).splitlines()[0]}") from None
    return result[-1]


def _check(query: str) -> None:
    """Refuse anything but one read-only statement, saying what is allowed."""
    if not is_utf8(query):
        raise UsageError("the query is not valid UTF-8 text (check the shell's locale or the file it came from)")
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as e:
        if not looks_like_select(query):
            first = query.split(None, 1)[0][:40] if query.strip() else ""
            raise UsageError(f"the query starts with {first!r}: {_ONLY}; check the first word for a typo") from None
        raise UsageError(f"query failed: {str(e).splitlines()[0]}") from None
    if len(statements) != 1:
        raise UsageError("give one query" + (f", not {len(statements)} (separated by ';'); run `sql` once per query"
                                             if statements else ""))
    if not is_read_only_sql(query):
        kind = statements[0].type.name
        what = ("EXPLAIN runs only on a query (EXPLAIN ANALYZE executes the statement)" if kind == "EXPLAIN"
                else f"{kind} statements are not allowed")
        raise UsageError(f"{what}: {_ONLY}")
