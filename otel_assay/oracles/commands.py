"""CLI: ``otel-assay contracts``."""

from __future__ import annotations

import sys

import click

from ..errors import EXIT_BLOCK, EXIT_DEPLOY, EXIT_MANUAL, DataError, UsageError


def load_contracts(path: str):
    """The ``contracts:`` list of a YAML config file, parsed; UsageError naming what is wrong."""
    import yaml

    from .contracts import ContractError, parse_contracts

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise UsageError(f"cannot read config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UsageError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    if not isinstance(doc, dict) or "contracts" not in doc:
        raise UsageError(f"{path}: no `contracts:` list (see `otel-assay contracts --help` for the vocabulary)")
    try:
        return parse_contracts(doc["contracts"], where=f"{path}: contracts")
    except ContractError as e:
        raise UsageError(str(e)) from None


def _kinds_help() -> str:
    from .contracts import KINDS

    return "\n".join(f"  {k:<26} {v}" for k, v in KINDS.items())


def register(cli: click.Group) -> None:
    @cli.command(epilog="\b\nContract kinds:\n" + _kinds_help() + "\n\b\nOptions of every contract: name, threshold "
                 "(share of trials it must hold in, default 0.95), alpha (default 0.05), scenarios (list).")
    @click.argument("lake")
    @click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
                  help="YAML file with a `contracts:` list (the gate config works).")
    @click.option("--select", "selectors", multiple=True, metavar="KEY=VALUE",
                  help="Only trials matching (version, scenario, run, model, outcome); repeatable, ANDed.")
    @click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
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

        from ..analyze.engine import Engine
        from ..analyze.select import NoTrialsError, Selection, SelectorError, select_trials
        from ..collect.lake import LakeError
        from ..report.output import write_table
        from .contracts import ContractError, check_tools, evaluate, verdicts

        specs = load_contracts(config_path)
        if not specs:
            raise UsageError(f"{config_path}: the contracts list is empty")
        try:
            selection = Selection.parse(selectors)
        except SelectorError as e:
            raise UsageError(str(e)) from None
        try:
            eng = Engine(lake)
        except LakeError as e:
            raise DataError(str(e)) from None
        try:
            try:
                select_trials(eng, selection)
            except NoTrialsError as e:
                raise DataError(str(e)) from None
            eng.rows("CREATE OR REPLACE TEMP TABLE contract_trials AS "
                     "SELECT * FROM trials SEMI JOIN selected_trials USING (trace_id)")
            try:
                check_tools(eng, specs)
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
        found = {r["verdict"] for r in rows}
        code = EXIT_BLOCK if "FAIL" in found else EXIT_MANUAL if found - {"PASS"} else EXIT_DEPLOY
        sys.exit(code)
