"""Behavioural contracts judged on recorded traces, at zero token cost: a contract reads only
what the trials already recorded, so checking one never runs the agent again.

A contract is a property every trial should have — "at most 12 steps", "calls
lookup_order", "never calls delete_account", "the answer matches this regex" — declared in
the gate config (or built in Python) and evaluated over the ``trials`` and ``steps`` views.
Each kind compiles to a parameterised DuckDB expression: values from the config and from
trace data are only ever bound parameters, never pasted into SQL (the one exception is
``sql:``, an expression written by the config's author, judged apart in a locked-down copy of
the engine: it reads the trial's row and the lake's views, no other file). JSON-schema checks
run in Python on the values the query returns.

A contract holds, fails, or cannot be judged for a trial (NULL: for example ``max_cost_usd``
when the model has no price, or the output and argument contracts when the trial's text was
not recorded, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=NO_CONTENT; a trial that
gave no answer at all fails the output contracts; trials that do not count in pass rates, such
as infrastructure errors and empty runs, are left out). Per scenario and version, the share of
judged trials where it holds gets a Wilson interval and the three-valued verdict against the contract's
``threshold`` (the share it must hold in, default 0.95): PASS when the interval's lower bound
reaches it — with α = 0.05 that takes at least 73 trials without a violation — FAIL when the
upper bound is below it, INCONCLUSIVE in between; on few trials the exact binomial test must
confirm either (``otel_assay.stats.verdict``). Inside the gate a contract's FAIL is one test of
the gate's multiple-testing family. A threshold of 1 ("in every trial") is not
offered because no finite number of trials can show it.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import UsageError

if TYPE_CHECKING:
    import pyarrow as pa


SEP = "\x1f"  # joins a trial's tool names for the call_order pattern; not a character tool names use

# kind -> (value type check, description for errors and --help)
KINDS: dict[str, str] = {
    "max_steps": "an integer: at most this many agent steps",
    "max_tool_calls": "an integer: at most this many tool calls",
    "must_call": "a tool name or list of tool names that every trial calls",
    "never_call": "a tool name or list of tool names no trial calls",
    "call_order": "a list of tool names called in this order (other calls may come between)",
    "max_cost_usd": "a number: the trial's LLM cost in USD is at most this",
    "max_tokens": "an integer: input + output tokens of the trial's LLM calls are at most this",
    "max_latency_s": "a number: the trial takes at most this many seconds",
    "no_tool_errors": "true: no tool call ends in an error",
    "final_output_matches": "a regular expression (RE2) found in the final output",
    "final_output_contains": "a string contained in the final output",
    "final_output_json_schema": "a JSON schema the final output (parsed as JSON) satisfies",
    "tool_args_schema": "a mapping tool name -> JSON schema every call's arguments satisfy",
    "max_repeated_calls": "an integer: no identical tool call (same tool, same arguments) happens more than this often",
    "sql": "an SQL boolean expression over the trial's row (columns of the trials view); it may read the "
           "lake's views, no other file",
}
OPTION_KEYS = {"name", "threshold", "alpha", "scenarios"}
RESERVED_NAMES = {"trace_id", "scenario", "version"}  # columns of ContractResults.table beside the contracts'
TOOL_KINDS = {"must_call", "call_order", "tool_args_schema"}  # a tool they name must exist


class ContractError(UsageError, ValueError):
    """A contract that cannot be used (exit 3); the message names the contract and what to fix."""


@dataclass(frozen=True)
class Contract:
    kind: str
    value: Any
    name: str
    threshold: float = 0.95
    alpha: float = 0.05
    scenarios: tuple[str, ...] | None = None

    def applies_to(self, scenario: str | None) -> bool:
        return self.scenarios is None or scenario in self.scenarios


def _tool_list(value: Any, where: str, what: str = "tool name") -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        hint = " (quote names YAML reads as numbers)" if isinstance(value, list) and value else ""
        raise ContractError(f"{where}: expected a {what} or a non-empty list of {what}s{hint}, got {value!r}")
    return tuple(value)


def _check_schema(schema: Any, where: str) -> None:
    # imported here: `otel-assay` loads this module at start-up, and so does @stochastic while
    # pytest collects; jsonschema (0.26 s) loads only when a contract has a schema
    import jsonschema

    if not isinstance(schema, (dict, bool)):
        raise ContractError(f"{where}: a JSON schema must be a mapping, got {type(schema).__name__}")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        raise ContractError(f"{where}: invalid JSON schema: {e.message}") from None
    _check_refs(schema, where)


def _refuse_retrieval(uri: str) -> Any:
    raise LookupError(f"{uri} is not part of the schema")


def _closed_registry():
    """A registry that never retrieves anything. jsonschema's default one fetches any `$ref`
    it does not know, over HTTP or from `file://` paths; a gate config comes from the pull
    request it judges, so a ref in it must not reach the network or the machine's files."""
    import referencing  # imported here: part of jsonschema, see _check_schema

    return referencing.Registry(retrieve=_refuse_retrieval)


def checked_validator(schema: Any, where: str):
    """The validator of a schema from a config: a valid schema whose every reference resolves
    inside it, or a ContractError naming ``where`` and what to fix."""
    _check_schema(schema, where)
    return closed_validator(schema)


def closed_validator(schema: Any):
    """A jsonschema validator for ``schema`` whose references resolve inside the schema only
    (the JSON-schema meta-schemas jsonschema ships aside); any other reference raises
    ``referencing.exceptions.Unresolvable`` instead of being fetched."""
    import jsonschema  # imported here: see _check_schema

    return jsonschema.validators.validator_for(schema)(schema, registry=_closed_registry())


_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


def _pointers(schema: Any) -> dict[int, str]:
    """The JSON pointer of every mapping in ``schema``, by identity (to name where a bad ref is)."""
    out: dict[int, str] = {}
    stack = [(schema, "")]
    while stack:  # a loop, not recursion: a config may nest deeper than Python's stack
        node, at = stack.pop()
        if isinstance(node, dict):
            out.setdefault(id(node), at)
            stack.extend((v, f"{at}/{str(k).replace('~', '~0').replace('/', '~1')}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{at}/{i}") for i, v in enumerate(node))
    return out


def _check_refs(schema: Any, where: str) -> None:
    """Refuse, when the config loads, every reference that does not resolve inside the schema:
    a URL, a file, a meta-schema, or a part of the schema that does not exist. Checked then,
    not when the first trial is judged, so a bad config fails before the gate reads the lake,
    with the place of the reference. Only the keywords the schema's own draft reads as
    subschemas are followed, as the validator does (a `$ref` key inside `const` is data)."""
    import jsonschema  # imported here: see _check_schema
    import referencing.jsonschema
    from referencing.exceptions import Unresolvable

    cls = jsonschema.validators.validator_for(schema)
    spec = referencing.jsonschema.specification_with(cls.ID_OF(cls.META_SCHEMA) or "urn:unknown-dialect",
                                                     default=referencing.Specification.OPAQUE)
    pointers = _pointers(schema)
    root = spec.create_resource(schema)
    stack = [(root, _closed_registry().resolver_with_root(root))]
    seen: set[int] = set()
    while stack:
        resource, resolver = stack.pop()
        contents = resource.contents
        if not isinstance(contents, dict) or id(contents) in seen:
            continue
        seen.add(id(contents))
        for kw in _REF_KEYWORDS:
            ref = contents.get(kw)
            if not isinstance(ref, str):
                continue
            try:
                resolved = resolver.lookup(ref)
            except (Unresolvable, ValueError):  # ValueError: not a URI at all, e.g. "http://["
                raise ContractError(
                    f"{where}: {kw} {ref!r} at {pointers.get(id(contents), '?')}/{kw} does not point to a part "
                    "of this schema; a $ref resolves only inside the schema itself (as '#/$defs/name'), "
                    "so that a config can never make otel-assay fetch a URL or read a file"
                ) from None
            # the target may lie outside the keywords walked below (under an unknown keyword)
            stack.append((spec.create_resource(resolved.contents), resolved.resolver))
        stack.extend((sub, resolver.in_subresource(sub)) for sub in resource.subresources())


def _number(value: Any, where: str, *, integer: bool = False) -> float | int:
    ok = (isinstance(value, int) if integer else isinstance(value, (int, float))) and not isinstance(value, bool)
    try:  # NaN compares as the largest number in DuckDB, so `cost_usd <= nan` would hold in every trial
        ok = ok and 0 <= float(value) < math.inf
    except OverflowError:  # an integer no float (or DuckDB parameter) holds
        ok = False
    if not ok:
        raise ContractError(f"{where}: expected a finite non-negative {'integer' if integer else 'number'}, "
                            f"got {value!r}")
    return value


def parse_contracts(spec: Any, *, where: str = "contracts") -> list[Contract]:
    """Contracts from config data: a list of mappings, each with one contract kind.

    >>> parse_contracts([{"max_steps": 12}, {"must_call": ["lookup"], "threshold": 0.9}])
    """
    if spec is None:
        return []
    if not isinstance(spec, list):
        raise ContractError(f"{where}: expected a list of contracts, got {type(spec).__name__}")
    out: list[Contract] = []
    names: set[str] = set()
    for i, item in enumerate(spec, 1):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ContractError(f"{at}: expected a mapping like {{max_steps: 12}}, got {item!r}")
        kinds = [k for k in item if k in KINDS]
        unknown = [k for k in item if k not in KINDS and k not in OPTION_KEYS]
        if unknown:
            raise ContractError(f"{at}: unknown key {unknown[0]!r}; contract kinds: {', '.join(KINDS)}; "
                                f"options: {', '.join(sorted(OPTION_KEYS))}")
        if len(kinds) != 1:
            raise ContractError(f"{at}: needs exactly one contract kind, found {kinds or 'none'}")
        kind = kinds[0]
        value = item[kind]
        at = f"{at} ({kind})"
        if kind in ("max_steps", "max_tool_calls", "max_tokens", "max_repeated_calls"):
            value = _number(value, at, integer=True)
        elif kind in ("max_cost_usd", "max_latency_s"):
            value = float(_number(value, at))
        elif kind in ("must_call", "never_call"):
            value = _tool_list(value, at)
        elif kind == "call_order":
            value = _tool_list(value, at)
            if len(value) < 2:
                raise ContractError(f"{at}: name at least two tools")
        elif kind == "no_tool_errors":
            if value is not True:
                raise ContractError(f"{at}: write `no_tool_errors: true`")
        elif kind == "final_output_matches":
            if not isinstance(value, str):
                raise ContractError(f"{at}: expected a regular expression string")
            _check_regex(value, at)
        elif kind == "final_output_contains":
            if not isinstance(value, str) or not value:
                raise ContractError(f"{at}: expected a non-empty string")
        elif kind == "final_output_json_schema":
            _check_schema(value, at)
        elif kind == "tool_args_schema":
            if not isinstance(value, Mapping) or not value:
                raise ContractError(f"{at}: expected a mapping of tool name to JSON schema")
            for tool, schema in value.items():
                _check_schema(schema, f"{at} tool {tool!r}")
            value = dict(value)
        elif kind == "sql":
            if not isinstance(value, str) or not value.strip():
                raise ContractError(f"{at}: expected an SQL boolean expression")
        name = item.get("name", kind)
        if not isinstance(name, str) or not name:
            raise ContractError(f"{at}: name must be a non-empty string")
        if name in names:
            raise ContractError(f"{at}: two contracts are named {name!r}; give one a `name:`")
        if name in RESERVED_NAMES:
            raise ContractError(f"{at}: {name!r} cannot name a contract (it is a column of the results); "
                                "choose another `name:`")
        names.add(name)
        threshold = item.get("threshold", 0.95)
        alpha = item.get("alpha", 0.05)
        for opt, v in (("threshold", threshold), ("alpha", alpha)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
                raise ContractError(f"{at}: {opt} must be a number strictly between 0 and 1, got {v!r}")
        scenarios = item.get("scenarios")
        if scenarios is not None:
            scenarios = _tool_list(scenarios, f"{at} scenarios", "scenario name")
        out.append(Contract(kind, value, name, float(threshold), float(alpha), scenarios))
    return out


def _check_regex(pattern: str, where: str) -> None:
    import duckdb  # imported here: 0.16 s that start-up must not pay (see _check_schema)

    # DuckDB's regex engine (RE2) decides, not Python's; on a connection of our own, not the
    # process-wide default one the user's code may be using
    try:
        with duckdb.connect() as con:
            con.execute("SELECT regexp_matches('', ?)", [pattern]).fetchall()
    except duckdb.Error as e:
        raise ContractError(f"{where}: invalid regular expression {pattern!r}: {str(e).splitlines()[0]}") from None


# ------------------------------------------------------------------------------ evaluation
_FACTS = """
WITH tool_steps AS (
    SELECT trace_id,
           list(tool_name ORDER BY seq) AS tools,
           count(*) FILTER (WHERE status = 'error') AS tool_errors
    FROM steps WHERE step_kind = 'tool' GROUP BY trace_id
),
final AS (
    SELECT trace_id, arg_max(output_text, seq) AS final_output, true AS answered
    FROM steps WHERE step_kind = 'respond' GROUP BY trace_id
),
repeats AS (
    -- calls whose arguments were not recorded (content capture off) may or may not repeat
    -- one another: they bound the repeat count from above, recorded ones from below
    SELECT trace_id, max(known) AS max_repeat, max(known + unrecorded) AS max_repeat_possible
    FROM (SELECT trace_id, tool_name, coalesce(max(n) FILTER (WHERE tool_args IS NOT NULL), 0) AS known,
                 coalesce(sum(n) FILTER (WHERE tool_args IS NULL), 0) AS unrecorded
          FROM (SELECT trace_id, tool_name, tool_args, count(*) AS n FROM steps
                WHERE step_kind = 'tool' GROUP BY trace_id, tool_name, tool_args)
          GROUP BY trace_id, tool_name)
    GROUP BY trace_id
),
facts AS (
    SELECT t.*,
           coalesce(ts.tools, []::VARCHAR[]) AS tools,
           coalesce(ts.tool_errors, 0) AS tool_errors,
           f.final_output,
           coalesce(f.answered, false) AS answered,
           coalesce(r.max_repeat, 0) AS max_repeat,
           coalesce(r.max_repeat_possible, 0) AS max_repeat_possible
    FROM {trials} t
    LEFT JOIN tool_steps ts USING (trace_id)
    LEFT JOIN final f USING (trace_id)
    LEFT JOIN repeats r USING (trace_id)
)
"""


# kinds that are one comparison with one bound value
_ONE_VALUE = {
    "max_steps": "n_steps <= ?",
    "max_tool_calls": "n_tool <= ?",
    "max_cost_usd": "cost_usd <= ?",
    # the tokens the calls report, as fingerprints' total_tokens: output-only usage is still usage
    "max_tokens": "coalesce(input_tokens + output_tokens, input_tokens, output_tokens) <= ?",
    "max_latency_s": "duration_ns <= ? * 1e9",
    # no respond step: the agent did not answer (fails); a respond step whose text was not
    # recorded (content capture off) cannot be judged (NULL)
    "final_output_matches": "CASE WHEN answered THEN regexp_matches(final_output, ?) ELSE false END",
    "final_output_contains": "CASE WHEN answered THEN contains(final_output, ?) ELSE false END",
}


def _expression(c: Contract, params: list) -> str | None:
    """The SQL for one contract (binding its values into ``params``); None if judged in Python
    or, ``sql:``, apart (_sql_contracts)."""
    k, v = c.kind, c.value
    if k in _ONE_VALUE:
        params.append(v)
        return _ONE_VALUE[k]
    if k == "max_repeated_calls":
        params += [v, v]
        return "CASE WHEN max_repeat > ? THEN false WHEN max_repeat_possible > ? THEN NULL ELSE true END"
    if k == "must_call":
        params.append(list(v))
        return "list_has_all(tools, ?::VARCHAR[])"
    if k == "never_call":
        params.append(list(v))
        return "NOT list_has_any(tools, ?::VARCHAR[])"
    if k == "call_order":
        # (?s): a tool name with a newline in it may come between two of the named ones
        params.append("(?s)" + SEP + (SEP + "(?:.*" + SEP + ")?").join(re.escape(t) for t in v) + SEP)
        return f"regexp_matches('{SEP}' || array_to_string(tools, '{SEP}') || '{SEP}', ?)"
    if k == "no_tool_errors":
        return "tool_errors = 0"
    return None


@dataclass
class ContractResults:
    """One row per trial: trace_id, scenario, version, then one BOOLEAN column per contract."""

    contracts: list[Contract]
    table: "pa.Table"

    def holds(self, name: str) -> list[bool | None]:
        return self.table.column(name).to_pylist()


def known_tools(engine) -> set[str]:
    """Tools seen in the lake's steps or in tool definitions recorded on LLM spans."""
    tools = {r[0] for r in engine.rows("SELECT DISTINCT tool_name FROM steps WHERE tool_name IS NOT NULL")}
    try:
        tools |= {r[0] for r in engine.rows("SELECT DISTINCT tool_name FROM parsed_tool_definitions")}
    except Exception:  # older lakes / views without tool definitions
        pass
    return tools


def check_names(engine, contracts: Sequence[Contract], *, scenarios: bool = True,
                tools: set[str] | None = None) -> None:
    """Refuse contracts that name a tool the lake has never seen (a typo judges every trial
    wrong) or, with ``scenarios``, are scoped only to scenarios it has no trials of (a typo
    judges nothing; the gate, whose arms may come from two lakes, notes it in its report).
    ``tools``: the tools known (default: the engine's lake's); the gate passes both lakes',
    since a candidate that stopped calling a required tool is a regression, not a typo."""
    seen_scenarios = None
    for c in contracts:
        if c.scenarios and scenarios:
            if seen_scenarios is None:
                seen_scenarios = {r[0] for r in engine.rows("SELECT DISTINCT scenario FROM trials WHERE scenario IS NOT NULL")}
            if not set(c.scenarios) & seen_scenarios:
                seen = ", ".join(sorted(seen_scenarios)[:20]) or "none"
                raise ContractError(f"contract {c.name!r} is scoped to scenarios the lake has no trials of "
                                    f"({', '.join(c.scenarios)}); scenarios in the lake: {seen}")
        if c.kind not in TOOL_KINDS:
            continue
        named = list(c.value)  # tool names, or the keys of a tool_args_schema mapping
        tools = known_tools(engine) if tools is None else tools
        missing = [t for t in named if t not in tools]
        if missing:
            seen = ", ".join(sorted(tools)[:20]) or "none"
            raise ContractError(f"contract {c.name!r} ({c.kind}) names unknown tool {missing[0]!r}; "
                                f"tools seen: {seen}")


def evaluate(engine, contracts: Sequence[Contract], *, trials: str = "trials") -> ContractResults:
    """Judge every contract on every trial of ``trials`` (a view or table of trial rows)."""
    # imported here: duckdb and pyarrow (0.5 s) only when contracts are judged (see _check_schema)
    import duckdb
    import pyarrow as pa

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", trials):
        raise ValueError(f"not a table name: {trials!r}")
    params: list = []
    cols = []
    for i, c in enumerate(contracts):
        expr = _expression(c, params)
        if expr is not None:
            cols.append(f"CAST({expr} AS BOOLEAN) AS c{i}")
    user_sql = [(i, c) for i, c in enumerate(contracts) if c.kind == "sql"]
    # only the trials that count, as in the pass rates and the run: an infrastructure
    # error, a pre-validation failure, an empty run or a timeout before any tool call measured
    # nothing about the agent, yet (no tools, no answer) failed must_call and the output contracts
    # in the order the trials ran: the gate reads each contract's holds as a sequence, whose
    # test is valid at every prefix only if earlier trials stay earlier
    sql = _FACTS.format(trials=trials) + ("SELECT *" if user_sql else "SELECT trace_id, scenario, version") + \
        "".join(", " + c for c in cols) + \
        " FROM facts WHERE counted ORDER BY scenario, version, trial_index NULLS LAST, start_time_unix_nano, trace_id"
    try:
        base = engine.con.sql(sql, params=params).to_arrow_table()
    except duckdb.Error as e:
        raise ContractError(f"contract evaluation failed: {str(e).splitlines()[0]}") from None
    trace_ids = base.column("trace_id").to_pylist()
    judged = {}
    if user_sql:
        facts = base.drop_columns([f"c{i}" for i in range(len(contracts)) if f"c{i}" in base.column_names])
        judged = _sql_contracts(engine, facts, user_sql)
    columns: dict[str, list] = {"trace_id": trace_ids, "scenario": base.column("scenario").to_pylist(),
                                "version": base.column("version").to_pylist()}
    for i, c in enumerate(contracts):
        if f"c{i}" in base.column_names:
            values = base.column(f"c{i}").to_pylist()
        elif c.kind == "sql":
            values = judged[i]
        elif c.kind == "final_output_json_schema":
            values = _final_output_schema(engine, trials, trace_ids, c)
        else:
            values = _tool_args_schema(engine, trials, trace_ids, c)
        scen = columns["scenario"]
        columns[c.name] = [v if c.applies_to(s) else None for v, s in zip(values, scen)]
    table = pa.table({k: pa.array(v, pa.bool_() if k not in ("trace_id", "scenario", "version") else pa.string())
                      for k, v in columns.items()})
    return ContractResults(list(contracts), table)


def check_sql(contracts: Sequence[Contract]) -> None:
    """Judge the ``sql:`` contracts over an empty lake: one that cannot run (a misspelt column,
    a file read, a second statement) raises :class:`ContractError` now, not after the trials
    it would judge have been run and paid for (``otel-assay run --config``)."""
    # imported here: the engine brings duckdb and pyarrow (see _check_schema)
    from ..analyze.engine import Engine

    sql = [c for c in contracts if c.kind == "sql"]
    if not sql:
        return
    with tempfile.TemporaryDirectory(prefix="otel-assay-check-") as d:
        (Path(d) / "spans").mkdir()
        with Engine(d) as eng:
            evaluate(eng, sql)


def _sql_contracts(engine, facts: "pa.Table", contracts: list[tuple[int, Contract]]) -> dict[int, list[bool | None]]:
    """Judge the ``sql:`` contracts: each expression over the trial's row (``facts``), in a
    locked-down copy of the engine, so that it reads the row and the lake's views but no other
    file (``read_csv('/etc/passwd')``, ``COPY ... TO``, ``ATTACH``: a config from a pull
    request runs in CI with its secrets), and as one expression of one query, so that it cannot
    close the query and start another. ``{index: holds per facts row}``."""
    import duckdb  # imported here: see evaluate

    out = {}
    trace_ids = facts.column("trace_id").to_pylist()
    with engine.locked_copy({"facts": facts}) as box:
        for i, c in contracts:
            query = f"SELECT trace_id, CAST(({c.value}) AS BOOLEAN) FROM facts"
            what = f"contract {c.name!r}: its sql: expression {c.value!r}"
            try:
                one = len(duckdb.extract_statements(query)) == 1
            except duckdb.Error as e:
                raise ContractError(f"{what} does not parse: {str(e).splitlines()[0]}") from None
            if not one:
                raise ContractError(f"{what} must be one boolean expression over the trial's row, not "
                                    "several statements (a ';' or an unbalanced ')')")
            try:
                rows = box.con.execute(query).fetchall()
            except duckdb.PermissionException as e:
                raise ContractError(f"{what} may read the trial's row and the lake's views, not other files "
                                    f"or databases ({str(e).splitlines()[0]})") from None
            except duckdb.Error as e:
                raise ContractError(f"{what} failed: {str(e).splitlines()[0]}; give a boolean expression over "
                                    "the columns of the trials view (and tools, tool_errors, final_output)") from None
            holds = dict(rows)
            if len(rows) != len(trace_ids) or holds.keys() != set(trace_ids):
                raise ContractError(f"{what} must give one value per trial, as a boolean expression over "
                                    f"the trial's row does; it gave {len(rows)} for {len(trace_ids)} trials")
            out[i] = [holds[t] for t in trace_ids]
    return out


def _valid(validator, text: str, contract: Contract) -> bool:
    """Whether ``text`` parses as JSON that satisfies the schema; a schema that cannot be
    applied (a ``$ref`` outside it, in a contract built without ``parse_contracts``) is the
    config's fault, not the trial's."""
    from referencing.exceptions import Unresolvable  # imported here: part of jsonschema, see _check_schema

    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    try:
        return validator.is_valid(value)
    except RecursionError:
        return False
    except Unresolvable as e:
        raise ContractError(f"contract {contract.name!r} ({contract.kind}): its JSON schema has a $ref that "
                            f"cannot be resolved ({e}); only references within the schema work") from None


def _final_output_schema(engine, trials: str, trace_ids: list[str], c: Contract) -> list[bool | None]:
    validator = closed_validator(c.value)
    rows = engine.rows(f"SELECT s.trace_id, arg_max(s.output_text, s.seq) FROM steps s SEMI JOIN {trials} t "
                       "USING (trace_id) WHERE s.step_kind = 'respond' GROUP BY s.trace_id")
    finals = dict(rows)
    out: list[bool | None] = []
    for tid in trace_ids:
        if tid not in finals:
            out.append(False)  # no answer at all
        elif finals[tid] is None:
            out.append(None)   # an answer whose text was not recorded
        else:
            out.append(_valid(validator, finals[tid], c))
    return out


def _tool_args_schema(engine, trials: str, trace_ids: list[str], c: Contract) -> list[bool | None]:
    validators = {t: closed_validator(s) for t, s in c.value.items()}
    rows = engine.con.execute(
        f"SELECT s.trace_id, s.tool_name, s.tool_args FROM steps s SEMI JOIN {trials} t USING (trace_id) "
        "WHERE s.step_kind = 'tool' AND list_contains(?::VARCHAR[], s.tool_name)", [list(c.value)]).fetchall()
    bad: set[str] = set()
    unrecorded: set[str] = set()
    for tid, tool, args in rows:
        if args is None:  # arguments not recorded (content capture off): this call cannot be judged
            unrecorded.add(tid)
        elif not _valid(validators[tool], args, c):
            bad.add(tid)
    return [False if tid in bad else None if tid in unrecorded else True for tid in trace_ids]


# ------------------------------------------------------------------------------ verdicts
@dataclass(frozen=True)
class ContractVerdict:
    contract: str
    kind: str
    scenario: str | None
    version: str | None
    n: int                      # trials judged (holds or fails)
    holds: int
    unknown: int                # trials the contract could not judge (NULL)
    rate: float | None
    ci: tuple[float, float] | None
    threshold: float
    verdict: str                # PASS / FAIL / INCONCLUSIVE
    reason: str = ""


def tally(items: Iterable[tuple[Any, bool | None]]) -> dict[Any, list[int]]:
    """Per key of the ``(key, holds)`` items: [judged, held, unjudged]; None is unjudged."""
    out: dict[Any, list[int]] = {}
    for key, holds in items:
        g = out.setdefault(key, [0, 0, 0])
        if holds is None:
            g[2] += 1
        else:
            g[0] += 1
            g[1] += int(holds)
    return out


def verdicts(results: ContractResults) -> list[ContractVerdict]:
    """Per contract, scenario and version: the share of trials where it holds, against its threshold."""
    # imported here: the statistics bring scipy (0.9 s), which start-up must not pay (see _check_schema)
    from ..stats import verdict as pass_rate_verdict

    cols = {c.name: results.holds(c.name) for c in results.contracts}
    scen = results.table.column("scenario").to_pylist()
    ver = results.table.column("version").to_pylist()
    out = []
    for c in results.contracts:
        groups = tally(((s, v), h) for s, v, h in zip(scen, ver, cols[c.name]) if c.applies_to(s))
        for (s, v), (n, k, unknown) in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
            if n == 0:
                out.append(ContractVerdict(c.name, c.kind, s, v, 0, 0, unknown, None, None, c.threshold,
                                           "INCONCLUSIVE", "no trial could be judged"))
                continue
            r = pass_rate_verdict(k, n, c.threshold, c.alpha)
            out.append(ContractVerdict(c.name, c.kind, s, v, n, k, unknown, k / n, (r.ci.low, r.ci.high),
                                       c.threshold, r.verdict.value))
    return out


def outcome_from_contracts(results: ContractResults, names: Iterable[str] | None = None) -> dict[str, bool | None]:
    """A trial outcome for agents that recorded none: pass iff every named contract holds.

    A trial any named contract could not judge has no outcome (None).
    """
    names = list(names) if names is not None else [c.name for c in results.contracts]
    cols = [results.holds(n) for n in names]
    out = {}
    for i, tid in enumerate(results.table.column("trace_id").to_pylist()):
        vals = [col[i] for col in cols]
        out[tid] = None if any(v is None for v in vals) else all(vals)
    return out
