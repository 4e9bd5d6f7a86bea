"""The analysis commands: steps, trials, pass-rates, fingerprint, coverage, stability, label.

Each is a thin shell over :mod:`otel_assay.analyze.tables`, imported when the command runs
(start-up time: see the package).
"""

from __future__ import annotations

import click

from ..report.output import FORMATS
from .options import SELECTOR_HELP, FiniteFloatRange

# the default λ of state coverage, analyze's DEFAULT_STATE_LAMBDA (importing it here would
# import numpy at start-up; a test holds the two equal)
STATE_LAMBDA_DEFAULT = 50.0


def _write(table, fmt: str, main_columns: list[str] | None = None) -> None:
    """Print a view: a terminal table shows a wide view's main columns, csv and json all."""
    from ..report.output import write_table

    if fmt == "table" and main_columns:
        table = table.select(main_columns)
    write_table(table, fmt)


def _common(f):
    """LAKE and the options every view shares: the selection, the format, the price table."""
    f = click.option("--prices", type=click.Path(dir_okay=False), default=None,
                     help="CSV price table replacing the shipped one (also $OTEL_ASSAY_PRICES).")(f)
    f = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                     help="Output format.")(f)
    f = click.option("--select", "selectors", multiple=True, metavar="KEY=VALUE", help=SELECTOR_HELP)(f)
    f = click.argument("lake")(f)
    return f


@click.command()
@_common
def steps(lake, selectors, fmt, prices):
    """One row per agent step of the selected trials (the steps view).

    Every instrumentation dialect is normalised (OTel GenAI of any vintage, OpenInference,
    OpenLLMetry, LangSmith, AutoGen and CrewAI native). The terminal table shows the main
    columns; --format csv/json gives all of them.
    """
    from ..analyze import tables

    _write(tables.steps(lake, selectors, prices), fmt, tables.MAIN_COLUMNS['steps'])


@click.command()
@_common
def trials(lake, selectors, fmt, prices):
    """One row per trial (trace) with scenario, version, outcome, error class, counts,
    tokens, cost and duration (the trials view)."""
    from ..analyze import tables

    _write(tables.trials(lake, selectors, prices), fmt, tables.MAIN_COLUMNS['trials'])


@click.command("pass-rates")
@_common
def pass_rates(lake, selectors, fmt, prices):
    """Per-protocol and intent-to-treat pass rates per scenario and version.

    Infrastructure errors, pre-validation failures and empty runs are excluded from the
    per-protocol rate; a timeout after a tool call counts as a failure.
    """
    from ..analyze import tables

    _write(tables.pass_rates(lake, selectors, prices), fmt)


@click.command()
@click.option("--tools", default=None, metavar="A,B,...",
              help="Tool vocabulary for the tool-usage columns (default: tools the selected trials called).")
@_common
def fingerprint(lake, selectors, fmt, prices, tools):
    """The behavioural fingerprint of each selected trial: the numbers the gate's
    fingerprint test compares.

    Columns are documented in queries/fingerprints.sql; `tool:<name>` columns are the
    tool-usage frequencies over the tool vocabulary (--tools, default: every tool the
    selected trials called).
    """
    from ..analyze import tables

    _write(tables.fingerprint(lake, selectors, prices, tools), fmt)


@click.command()
@click.option("--tools", default=None, metavar="A,B,...",
              help="Tools available (default: tool definitions recorded on LLM spans).")
@click.option("--models", default=None, metavar="A,B,...", help="Target models (model coverage).")
@click.option("--lambda", "state_lambda", type=FiniteFloatRange(min=0, min_open=True),
              default=STATE_LAMBDA_DEFAULT, show_default=True,
              help="λ of state coverage 1 - exp(-states/λ): the expected number of abstract states.")
@click.option("--sets", "show_sets", is_flag=True, help="Print the coverage sets, not the metrics.")
@_common
def coverage(lake, selectors, fmt, prices, tools, models, state_lambda, show_sets):
    """Coverage of the selected trials: tool, decision path (Chao1), state, boundary and
    model coverage, and their geometric mean over the defined dimensions.

    Tools available come from --tools, else from the tool definitions recorded on LLM
    spans; model coverage needs --models (otherwise n/a). --sets prints the sets instead.
    """
    from ..analyze import tables

    _write(tables.coverage(lake, selectors, prices, tools, models, state_lambda, show_sets), fmt)


@click.command()
@click.option("--floor", "floors", multiple=True, metavar="[NAME=]VALUE",
              help="Drift floor for all sub-scores or one (repeatable; default 0.5).")
@click.option("--per-trial", is_flag=True, help="One row per trial instead of per scenario and version.")
@_common
def stability(lake, selectors, fmt, prices, floors, per_trial):
    """Stability sub-scores (tool usage stability, response consistency, redundancy, cost
    per progress): across the trials of each scenario and version (score, weakest_score,
    variance) or, with --per-trial, per trial. drift_flags lists the sub-scores strictly
    below their floor (default 0.5; --floor 0.6 or --floor redundancy=0.8).
    """
    from ..analyze import tables

    _write(tables.stability(lake, selectors, prices, floors, per_trial), fmt)


@click.command()
@click.option("--file", "file", required=True, type=click.Path(dir_okay=False), help="Labels CSV.")
@click.argument("lake", type=click.Path(file_okay=False))
def label(lake, file):
    """Label traces that carry no assay.* attributes.

    FILE is a CSV with one key column (trace_id, gen_ai.conversation.id or session.id) and
    any of scenario, version, outcome (pass/fail), run, score. The labels go to a new file
    under LAKE/labels/; span files are never modified. Labels merge column by column: a later
    file's non-empty values win, the columns it leaves out or empty keep earlier labels.

    A trial is one trace: a conversation or session key labels every trace that carries it,
    each a trial of its own. The command reports how many traces the keys matched, and the
    keys that matched several.
    """
    from ..analyze import tables

    n, path, matches = tables.label(lake, file)
    click.echo(f"labelled {n} key(s) matching {matches.traces} trace(s): {path}")
    if matches.shared:
        click.echo(f"note: {matches.shared} of {n} key(s) match several traces ({matches.shared_traces} traces, at "
                   f"most {matches.most} for one key): each trace is a trial of its own, with the key's labels. A "
                   "run recorded as several traces (instrumentations whose context does not reach each other) counts "
                   "as several trials; run it under one root span to make it one trial")
    if matches.unmatched:
        # not an error: conversation and session labels also apply to traces recorded later
        click.echo(f"warning: {matches.unmatched} of {n} key(s) match no trace in {lake} yet; check the "
                   "key column if they should", err=True)


def register(group: click.Group) -> None:
    for command in (steps, trials, pass_rates, fingerprint, coverage, stability, label):
        group.add_command(command)
