"""Trial selectors: ``--select key=value`` over the trials view, one syntax for every command.

Keys: version, scenario, run, model, outcome. Several selectors are ANDed; one selector may
also hold several comma-separated pairs (``version=v2,scenario=refund``, the gate's form). A
part without '=' belongs to the value before it (``scenario=refund, damaged item``). An
empty value selects the trials without one (``outcome=``: not labelled yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..errors import DataError, UsageError, is_utf8
from ..text import printable

# selector key -> SQL predicate over the trials view (one parameter)
SELECTOR_KEYS = {
    "version": "version = ?",
    "scenario": "scenario = ?",
    "run": "run_id = ?",
    "model": "list_contains(models, ?)",
    "outcome": "outcome = ?",
}
# the keys whose columns trial_facts has (what a trial's spans and labels say: the same
# column names as in trials); model is known from the trial's steps only
FACT_KEYS = ("version", "scenario", "run", "outcome")
# an empty value: the trials that have none (what the "no trials match" listing shows as "(none)")
_NONE_SQL = {
    "version": "version IS NULL",
    "scenario": "scenario IS NULL",
    "run": "run_id IS NULL",
    "model": "coalesce(len(models), 0) = 0",
    "outcome": "outcome IS NULL",
}
# what to list when nothing matches: the values the lake has for the key
_FOUND_SQL = {
    "version": "SELECT version AS v, count(*) AS n FROM trials GROUP BY ALL ORDER BY n DESC, v LIMIT 10",
    "scenario": "SELECT scenario AS v, count(*) AS n FROM trials GROUP BY ALL ORDER BY n DESC, v LIMIT 10",
    "run": "SELECT run_id AS v, count(*) AS n FROM trials GROUP BY ALL ORDER BY n DESC, v LIMIT 10",
    "model": "SELECT m AS v, count(*) AS n FROM (SELECT unnest(models) AS m FROM trials) GROUP BY ALL "
             "ORDER BY n DESC, v LIMIT 10",
    "outcome": "SELECT outcome AS v, count(*) AS n FROM trials GROUP BY ALL ORDER BY n DESC, v LIMIT 10",
}


class SelectorError(UsageError, ValueError):
    """A selector that cannot be parsed or names an unknown key: the user's to fix (exit 3)."""


class NoTrialsError(DataError, LookupError):
    """No trial matches the selectors (exit 4); the message says what the lake has."""


@dataclass(frozen=True)
class Selection:
    pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, selectors: Iterable[str]) -> "Selection":
        pairs: list[list[str]] = []
        for sel in selectors:
            if not is_utf8(sel):
                raise SelectorError(f"selector {sel!r} is not valid UTF-8 text; give the value as the lake "
                                    "stores it (UTF-8)")
            current = None  # the pair a part without '=' continues
            for raw in sel.split(","):
                part = raw.strip()
                if not part:
                    continue
                key, sep, value = part.partition("=")
                key = key.strip()
                if not sep and current:
                    # a value with a comma in it (scenario=refund, damaged item)
                    current[1] += "," + raw
                    continue
                if not sep or not key:
                    raise SelectorError(f"selector {part!r} is not key=value (keys: {', '.join(SELECTOR_KEYS)})")
                if key not in SELECTOR_KEYS:
                    raise SelectorError(f"unknown selector key {key!r} in {part!r}; "
                                        f"use one of: {', '.join(SELECTOR_KEYS)}")
                current = [key, value]
                pairs.append(current)
        pairs = [(k, v.strip()) for k, v in pairs]
        return cls(tuple(pairs))

    def where(self, keys: Iterable[str] = SELECTOR_KEYS) -> tuple[str, list[str]]:
        """A SQL predicate over the trials view and its parameters ('true' when empty):
        of the pairs whose key is in ``keys``."""
        pairs = [(k, v) for k, v in self.pairs if k in keys]
        if not pairs:
            return "true", []
        return (" AND ".join(SELECTOR_KEYS[k] if v else _NONE_SQL[k] for k, v in pairs),
                [v for _, v in pairs if v])

    def before_steps(self) -> tuple[str, list[str]] | None:
        """The part of :meth:`where` that the trial_facts view decides (every key but model,
        which the trial's LLM steps give), for reading only the traces it selects
        (Engine.scope); None when that part selects every trial."""
        if not any(k in FACT_KEYS for k, _ in self.pairs):
            return None
        return self.where(FACT_KEYS)

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.pairs) or "(all trials)"


def select_trials(engine, selection: Selection, table: str = "selected_trials") -> int:
    """Put the trace ids of the matching trials into temp table ``table``; return how many.

    Raises :class:`NoTrialsError` naming what the lake has for the selector keys when none
    match (or when the lake has no trials at all).
    """
    where, params = selection.where()
    engine.rows(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT trace_id FROM trials WHERE {where}",
                       params)
    n = engine.rows(f"SELECT count(*) FROM {table}")[0][0]
    if n:
        return n
    if engine.scoped:
        # what the whole lake has, not the traces the engine reads (selection by a model)
        lake = engine.unscoped()
        try:
            raise NoTrialsError(_nothing_matches(lake, selection))
        finally:
            lake.close()
    raise NoTrialsError(_nothing_matches(engine, selection))


def _nothing_matches(engine, selection: Selection) -> str:
    """What to say when no trial matches ``selection``: what the lake has for its keys."""
    total = engine.rows("SELECT count(*) FROM trials")[0][0]
    if total == 0:
        return "the lake has no trials (no spans)"
    found = []
    for key in dict(selection.pairs):
        rows = engine.rows(_FOUND_SQL[key])
        # the values are the lake's data: control characters are shown, not sent to the terminal
        found.append(f"{key}: " + (", ".join(f"{'(none)' if v is None else printable(v)} ({n})" for v, n in rows)
                                   or "none recorded"))
    return f"no trials match {selection}; the lake has {total} trials, with " + "; ".join(found)
