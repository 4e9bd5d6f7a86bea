"""The oracle commands: contracts and metamorphic, judged on recorded trials.

Each is a thin shell over :mod:`otel_assay.oracles.recorded`, imported when the command
runs (start-up time: see the package).
"""

from __future__ import annotations

import sys

import click

from ..oracles.contracts import KINDS
from ..report.output import FORMATS
from .options import SELECTOR_HELP


def _lake_options(section: str, what: str):
    """LAKE and the options both oracle commands share: the config with their ``section``,
    the trial selection and the format."""
    def wrap(f):
        f = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                         show_default=True, help="Output format.")(f)
        f = click.option("--select", "selectors", multiple=True, metavar="KEY=VALUE",
                         help=f"Only {what} matching {SELECTOR_HELP}")(f)
        f = click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
                         help=f"YAML file with a `{section}:` list (the gate config works).")(f)
        return click.argument("lake")(f)
    return wrap


@click.command(epilog="\b\nContract kinds:\n" + "\n".join(f"  {k:<26} {v}" for k, v in KINDS.items())
               + "\n\b\nOptions of every contract: name, threshold (share of trials it must hold in, default 0.95), "
               "alpha (default 0.05), scenarios (list).")
@_lake_options("contracts", "trials")
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
    from ..oracles.recorded import contract_rows, exit_code

    rows = contract_rows(lake, config_path, selectors)
    _write(rows, fmt)
    if not rows:
        click.echo("nothing was judged: no selected trial counts (infrastructure errors, empty runs and "
                   "timeouts before any tool call do not) or each contract is scoped to other scenarios",
                   err=True)
    sys.exit(exit_code(rows))


@click.command()
@_lake_options("metamorphic", "follow-up trials")
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
    from ..oracles.recorded import exit_code, relation_rows

    rows = relation_rows(lake, config_path, selectors)
    _write(rows, fmt)
    sys.exit(exit_code(rows))


def _write(rows, fmt: str) -> None:
    import pyarrow as pa

    from ..report.output import write_table

    write_table(pa.Table.from_pylist(rows), fmt)


def register(group: click.Group) -> None:
    for command in (contracts, metamorphic):
        group.add_command(command)
