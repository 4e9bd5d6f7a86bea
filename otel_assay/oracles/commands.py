"""CLI: ``otel-assay contracts``."""

from __future__ import annotations

import sys

import click

from ..errors import EXIT_BLOCK, EXIT_DEPLOY, EXIT_MANUAL, DataError, UsageError


def _load_yaml(path: str, key: str):
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise UsageError(f"cannot read config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UsageError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    if not isinstance(doc, dict) or key not in doc:
        raise UsageError(f"{path}: no `{key}:` list (see `otel-assay {key} --help`)")
    return doc[key]


def load_contracts(path: str):
    """The ``contracts:`` list of a YAML config file, parsed; UsageError naming what is wrong."""
    from .contracts import ContractError, parse_contracts

    try:
        return parse_contracts(_load_yaml(path, "contracts"), where=f"{path}: contracts")
    except ContractError as e:
        raise UsageError(str(e)) from None


def load_relations(path: str):
    """The ``metamorphic:`` list of a YAML config file, parsed."""
    from .contracts import ContractError
    from .metamorphic import parse_relations

    try:
        return parse_relations(_load_yaml(path, "metamorphic"), where=f"{path}: metamorphic")
    except ContractError as e:
        raise UsageError(str(e)) from None


def _open_selected(lake: str, selectors, table: str):
    """An engine over LAKE with the selected trials' rows in temp table ``table``."""
    from ..analyze.engine import Engine
    from ..analyze.select import NoTrialsError, Selection, SelectorError, select_trials
    from ..lake.files import LakeError

    try:
        selection = Selection.parse(selectors)
    except SelectorError as e:
        raise UsageError(str(e)) from None
    try:
        eng = Engine(lake)
    except LakeError as e:
        raise DataError(str(e)) from None
    try:
        select_trials(eng, selection)
    except NoTrialsError as e:
        eng.close()
        raise DataError(str(e)) from None
    eng.rows(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM trials SEMI JOIN selected_trials USING (trace_id)")
    return eng


def _exit_for(verdicts: set[str]) -> int:
    # no verdict at all (every contract scoped to scenarios not selected) supports no deploy
    return EXIT_BLOCK if "FAIL" in verdicts else EXIT_MANUAL if verdicts - {"PASS"} or not verdicts else EXIT_DEPLOY


def _kinds_help() -> str:
    from .contracts import KINDS

    return "\n".join(f"  {k:<26} {v}" for k, v in KINDS.items())


def _lake_options(what: str):
    """The options both oracle commands share: the config, the trial selection, the format."""
    def wrap(f):
        f = click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
                         show_default=True, help="Output format.")(f)
        f = click.option("--select", "selectors", multiple=True, metavar="KEY=VALUE",
                         help=f"Only {what} matching (version, scenario, run, model, outcome); repeatable, ANDed.")(f)
        return f
    return wrap


def register(cli: click.Group) -> None:
    @cli.command(epilog="\b\nContract kinds:\n" + _kinds_help() + "\n\b\nOptions of every contract: name, threshold "
                 "(share of trials it must hold in, default 0.95), alpha (default 0.05), scenarios (list).")
    @click.argument("lake")
    @click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
                  help="YAML file with a `contracts:` list (the gate config works).")
    @_lake_options("trials")
    def contracts(lake, config_path, selectors, fmt):
        """Judge behavioural contracts on the recorded trials of LAKE, without running the agent.

        \b
        Example config:
          contracts:
            - max_steps: 12
            - must_call: [lookup_order]
            - never_call: delete_account
            - final_output_matches: "(?i)refund"
              threshold: 0.9

        Per contract, scenario and version: trials judged, the share where it holds with a
        Wilson interval, and PASS / FAIL / INCONCLUSIVE against its threshold. Exit 0 when
        every verdict is PASS, 1 when any is FAIL, 2 otherwise.
        """
        import pyarrow as pa

        from ..report.output import write_table
        from .contracts import ContractError, check_names, evaluate, verdicts

        specs = load_contracts(config_path)
        if not specs:
            # the starter config from `otel-assay init` has `contracts: []`: say what goes there
            raise UsageError(f"{config_path}: the contracts list is empty; add contracts such as "
                             f"`contracts: [{{max_steps: 12}}, {{must_call: [lookup_order]}}]` "
                             f"(every kind: otel-assay contracts --help)")
        eng = _open_selected(lake, selectors, "contract_trials")
        try:
            try:
                check_names(eng, specs)
                results = evaluate(eng, specs, trials="contract_trials")
            except ContractError as e:
                raise UsageError(str(e)) from None
        finally:
            eng.close()
        rows = [{
            "contract": v.contract, "kind": v.kind, "scenario": v.scenario, "version": v.version,
            "trials": v.n, "holds": v.holds, "unjudged": v.unknown,
            "rate": None if v.rate is None else round(v.rate, 4),
            "ci_low": None if v.ci is None else round(v.ci[0], 4),
            "ci_high": None if v.ci is None else round(v.ci[1], 4),
            "threshold": v.threshold, "verdict": v.verdict,
        } for v in verdicts(results)]
        write_table(pa.Table.from_pylist(rows), fmt)
        if not rows:
            click.echo("nothing was judged: no selected trial counts (infrastructure errors, empty runs and "
                       "timeouts before any tool call do not) or each contract is scoped to other scenarios",
                       err=True)
        sys.exit(_exit_for({r["verdict"] for r in rows}))

    @cli.command()
    @click.argument("lake")
    @click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
                  help="YAML file with a `metamorphic:` list (the gate config works).")
    @_lake_options("follow-up trials")
    def metamorphic(lake, config_path, selectors, fmt):
        """Check metamorphic relations on recorded (source, follow-up) trial pairs of LAKE.

        \b
        Example config:
          metamorphic:
            - relation: doc-order          # the name follow-up trials carry (assay.mr.relation)
              family: permutation          # permutation | perturbation | composition | oracle
              compare: same_final_answer   # | same_tool_set | same_verdict | output_length_within
              threshold: 0.9               # share of pairs in which it must hold

        Follow-up trials are linked to their source by otel_assay.metamorphic.follow_up().
        Exit 0 when every relation PASSes, 1 when any FAILs, 2 otherwise; 4 when a relation
        has no pairs or its source trials are missing from the lake.
        """
        import pyarrow as pa

        from ..report.output import write_table
        from .metamorphic import RelationDataError, evaluate as evaluate_relations, verdicts as relation_verdicts

        relations = load_relations(config_path)
        if not relations:
            raise UsageError(f"{config_path}: the metamorphic list is empty; add relations such as "
                             f"`metamorphic: [{{relation: doc-order, compare: same_final_answer}}]` naming the "
                             f"relation your follow-up trials carry (otel-assay metamorphic --help)")
        eng = _open_selected(lake, selectors, "relation_trials")
        try:
            pairs = evaluate_relations(eng, relations, trials="relation_trials")
        except RelationDataError as e:
            raise DataError(str(e)) from None
        finally:
            eng.close()
        rows = [{
            "relation": v.relation, "family": v.family, "compare": v.compare, "version": v.version,
            "pairs": v.pairs, "holds": v.holds, "unjudged": v.unjudged,
            "violation_rate": None if v.violation_rate is None else round(v.violation_rate, 4),
            "ci_low": None if v.ci is None else round(v.ci[0], 4), "ci_high": None if v.ci is None else round(v.ci[1], 4),
            "threshold": v.threshold, "verdict": v.verdict,
        } for v in relation_verdicts(relations, pairs)]
        write_table(pa.Table.from_pylist(rows), fmt)
        sys.exit(_exit_for({r["verdict"] for r in rows}))
