"""The fingerprint matrix (the AgentAssay paper's behavioural fingerprint, one row per trial):
the fingerprints view plus one tool-usage frequency column per tool of a vocabulary, computed
in SQL (one ``sum(freq) FILTER`` per tool over fingerprint_tools: unlike DuckDB's PIVOT, that
form is plain SQL that other engines such as Spark run too)."""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa

TOOL_PREFIX = "tool:"


def tool_vocabulary(engine, trials_table: str | None = None) -> list[str]:
    """The tools called in the given trials (all trials when None), sorted."""
    join = f"SEMI JOIN {trials_table} USING (trace_id)" if trials_table else ""
    rows = engine.rows(f"SELECT DISTINCT tool_name FROM fingerprint_tools {join} ORDER BY 1")
    return [r[0] for r in rows]


def fingerprint_matrix(engine, trials_table: str | None = None, vocabulary: Sequence[str] | None = None) -> pa.Table:
    """One row per trial: the fingerprints columns, then ``tool:<name>`` = calls of that tool
    / n_steps for every tool of ``vocabulary`` (default: :func:`tool_vocabulary`), 0 when the
    trial never called it. Tools outside the vocabulary are not represented; a tool named
    twice in it (``--tools a,a``) gets one column, where the first names it."""
    # a column per name given made two columns of one name, which no table reader can tell apart
    vocab = list(dict.fromkeys(vocabulary)) if vocabulary is not None else tool_vocabulary(engine, trials_table)
    cols = [f"coalesce(sum(ft.freq) FILTER (WHERE ft.tool_name = ?), 0)::DOUBLE AS \"{TOOL_PREFIX}{i}\""
            for i in range(len(vocab))]
    join = f"SEMI JOIN {trials_table} USING (trace_id)" if trials_table else ""
    sql = (f"WITH f AS (SELECT * FROM fingerprints {join}) "
           f"SELECT f.*{''.join(', ' + c for c in cols)} FROM f LEFT JOIN fingerprint_tools ft USING (trace_id) "
           f"GROUP BY ALL ORDER BY f.trace_id")
    table = engine.query(sql, vocab)
    # the tool names are parameters in SQL (any text is safe there); name the columns after them here
    names = table.column_names[: len(table.column_names) - len(vocab)] + [f"{TOOL_PREFIX}{t}" for t in vocab]
    return table.rename_columns(names)
