"""The gate's commands: gate, regress, verdict, report, plan, init, demo.

Each is a thin click shell over :mod:`otel_assay.gate` and :mod:`otel_assay.report`, which
it imports when it runs (start-up time: see the package). Exit codes: 0 deploy/PASS,
1 block/FAIL, 2 manual/INCONCLUSIVE, 3 usage or configuration error, 4 data error.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from pathlib import Path

import click

from ..errors import UsageError
from ..report.files import check_output_paths, remove_stale_reports, write_reports
from ..report.otel import EmitError, check_target, emit_results
from .options import SELECTOR_HELP, UNIT, ReportsCommand


def _selector(ctx, param, values) -> str | None:
    # repeated: all conditions hold (as one comma-separated selector), not the last one silently
    return ",".join(values) if values else None


def _lake_argument(f):
    return click.argument("lake", type=click.Path())(f)


def _gate_command(f):
    """A command comparing two arms (gate, regress, report): LAKE, --config, the selectors and
    the report files, the same for all three."""
    f = click.pass_context(f)
    for opt in reversed([
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="Gate configuration YAML (`otel-assay init` writes a starter)."),
        click.option("--baseline", metavar="SEL", multiple=True, callback=_selector,
                     help=f"Baseline trials: {SELECTOR_HELP}"),
        click.option("--candidate", metavar="SEL", multiple=True, callback=_selector,
                     help="Candidate trials (same form; with neither, the older of two versions is the baseline)."),
        click.option("--baseline-lake", type=click.Path(), metavar="DIR",
                     help="Take the baseline from this lake (a stored baseline reused across CI runs)."),
        click.option("--threshold", type=UNIT, help="Pass-rate bar θ for the candidate (overrides the config)."),
        click.option("--alpha", type=UNIT, help="False-alarm rate (overrides the config)."),
        click.option("--delta", type=UNIT, help="Smallest pass-rate drop that matters (overrides the config)."),
        click.option("--json", "json_path", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Write the report as JSON (schema: otel_assay/report/schemas/gate-report.v1.json)."),
        click.option("--junit", "junit_path", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Write JUnit XML: one testcase per check (for GitHub Actions, GitLab, Jenkins)."),
        click.option("--html", "html_path", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Write a self-contained HTML report with plots (works offline)."),
        click.option("--emit-otel", metavar="TARGET",
                     help="Also emit the verdicts as OpenTelemetry events to `lake` or an OTLP/HTTP traces URL."),
        click.option("--quiet", "-q", is_flag=True, help="Print only the decision line."),
    ]):
        f = opt(f)
    return click.command(cls=ReportsCommand)(_lake_argument(f))


def _config(config_path, threshold=None, alpha=None, delta=None):
    from ..gate import load_config, with_overrides

    return with_overrides(load_config(config_path), threshold=threshold, alpha=alpha, delta=delta)


@contextlib.contextmanager
def _progress():
    """A spinner with the current step on stderr, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task("starting", total=None)
        yield lambda msg: prog.update(task, description=msg)


def _write_outputs(result, json_path, junit_path, html_path, emit_otel, lake, quiet: bool,
                   exit_with_decision: bool = True) -> None:
    from ..report.output import stdout_reader_may_leave

    # a reader that stops early (`gate ... | head`) changes neither the decision nor the reports
    with stdout_reader_may_leave():
        if quiet:
            code = f"exit {result.exit_code}" if exit_with_decision else f"the gate would exit {result.exit_code}"
            click.echo(f"decision: {result.decision} ({code})")
        else:
            # imported here: rich costs 0.03 s of start-up, which a quiet gate (the decision
            # line only, as CI scripts run it) does not use
            from ..report.terminal import render

            render(result, exit_with_decision=exit_with_decision)
    write_reports(result, json_path=json_path, junit_path=junit_path, html_path=html_path)
    if emit_otel:
        try:
            n = emit_results(result, emit_otel, lake)
        except EmitError as e:
            # the decision stands: a dashboard being down must not fail (or pass) the build
            click.echo(f"otel-assay: warning: the verdicts were not emitted to {emit_otel}: {e}", err=True)
        else:
            click.echo(f"emitted {n} gen_ai.evaluation.result events to {emit_otel}", err=True)
    for path, what in ((json_path, "JSON"), (junit_path, "JUnit"), (html_path, "HTML")):
        if path and not quiet:
            click.echo(f"{what} report: {path}", err=True)


def _run(ctx, mode, lake, config_path, baseline, candidate, baseline_lake, threshold, alpha, delta, json_path,
         junit_path, html_path, emit_otel, quiet, *, exit_with_decision=True):
    from ..gate import run_gate

    # before any check that can stop the run with exit 3, the report paths' own included (a
    # missing directory, two reports on one file): the reports of an earlier run must not
    # stay behind to be uploaded as this run's
    remove_stale_reports(json_path, junit_path, html_path, config=config_path)
    check_output_paths(json=json_path, junit=junit_path, html=html_path, config=config_path)
    check_target(emit_otel, lake)
    cfg = _config(config_path, threshold, alpha, delta)
    with _progress() as say:
        result = run_gate(lake, cfg, baseline=baseline, candidate=candidate, baseline_lake=baseline_lake,
                          mode=mode, progress=say)
    _write_outputs(result, json_path, junit_path, html_path, emit_otel, lake, quiet, exit_with_decision)
    ctx.exit(result.exit_code if exit_with_decision else 0)


@_gate_command
def gate(ctx, lake, **kw):
    """Decide deploy / block / manual for a candidate against a baseline: the CI gate.

    LAKE holds the candidate's trials (and the baseline's, unless --baseline-lake is
    given). The checks of every scenario are one family corrected for multiple testing:
    one FAIL anywhere blocks (the checks: docs/gate.md).

    Exit: 0 deploy (every check PASSes), 1 block (any check FAILs), 2 manual (anything
    inconclusive, or coverage below the minimum), 3 bad usage or config, 4 bad or missing
    data.

    \b
    Examples:
      otel-assay gate traces --baseline version=v1 --candidate version=v2
      otel-assay gate traces --baseline-lake baseline-traces --junit junit.xml --html report.html
    """
    _run(ctx, "gate", lake, **kw)


@_gate_command
def regress(ctx, lake, **kw):
    """Compare a candidate with a baseline, all checks, no coverage minimum (exploration).

    Same checks, options and exit codes as `gate`, but a coverage minimum in the config is
    ignored.
    """
    _run(ctx, "regress", lake, **kw)


@_gate_command
def report(ctx, lake, json_path, junit_path, html_path, **kw):
    """Run the gate and write its reports (--html, --json, --junit); always exits 0.

    For looking at results: the decision does not set the exit code (errors still exit 3
    or 4).
    """
    if not (json_path or junit_path or html_path):
        raise UsageError("say which report to write: --html FILE (and/or --json FILE, --junit FILE)")
    _run(ctx, "gate", lake, json_path=json_path, junit_path=junit_path, html_path=html_path,
         exit_with_decision=False, **kw)


@click.command(cls=ReportsCommand)
@_lake_argument
@click.option("--select", "select", metavar="SEL", multiple=True, callback=_selector,
              help=f"The trials to judge: {SELECTOR_HELP}")
@click.option("--threshold", type=UNIT, help="Pass-rate bar θ (required here or in the config).")
@click.option("--alpha", type=UNIT, help="Error rate: the interval is at level 1-α.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Gate configuration (YAML).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write the JSON report.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write JUnit XML.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write the HTML report.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the decision line.")
@click.pass_context
def verdict(ctx, lake, select, threshold, alpha, config_path, json_path, junit_path, html_path, quiet):
    """Judge one version's pass rate against a threshold θ, per scenario.

    PASS when the pass rate is shown above θ, FAIL when it is shown below (corrected
    across scenarios, with any configured contracts, as one family), by a test that stays
    valid however often you judge again after adding trials; INCONCLUSIVE otherwise.
    Exit 0 PASS, 1 FAIL, 2 INCONCLUSIVE.

    \b
    Example:
      otel-assay verdict traces --select version=v2 --threshold 0.85
    """
    from ..gate import run_verdict

    remove_stale_reports(json_path, junit_path, html_path, config=config_path)  # first, as in _run
    check_output_paths(json=json_path, junit=junit_path, html=html_path, config=config_path)
    cfg = _config(config_path, threshold, alpha)
    with _progress() as say:
        result = run_verdict(lake, cfg, select=select, progress=say)
    _write_outputs(result, json_path, junit_path, html_path, None, lake, quiet)
    ctx.exit(result.exit_code)


@click.command("plan")
@click.argument("lake", required=False, type=click.Path())
@click.option("--baseline", metavar="SEL", multiple=True, callback=_selector,
              help=f"The baseline trials whose pass rates and costs to plan from: {SELECTOR_HELP}")
@click.option("--rate", type=UNIT, help="Plan for this baseline pass rate instead of a lake's.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Gate configuration (YAML).")
@click.option("--alpha", type=UNIT, help="False-alarm rate (overrides the config).")
@click.option("--delta", type=UNIT, help="Smallest pass-rate drop that matters (overrides the config).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write the plan as JSON.")
def plan_command(lake, baseline, rate, config_path, alpha, delta, json_path):
    """How many trials per version the gate will need, before any is spent.

    Per scenario, from the baseline's pass rate in LAKE (or --rate): the mean trials the
    regression test takes to PASS an unchanged candidate and to FAIL one that dropped by
    delta, simulated with the rule the gate applies (valid however often you gate), and
    what they cost at the tokens and dollars a baseline trial used. Exit 0.

    \b
    Examples:
      otel-assay plan traces --baseline version=v1
      otel-assay plan --rate 0.9 --delta 0.05
    """
    import json

    from ..gate.plan import plan

    cfg = _config(config_path, alpha=alpha, delta=delta)
    p = plan(lake, cfg, baseline=baseline, rate=rate)
    for s in p.scenarios:
        same, drop = s.unchanged, s.dropped

        def trials(oc):
            return f"more than {oc.n_max}" if oc.p_open > 0.1 else f"{oc.expected_n:.0f}"

        line = (f"{s.scenario}: baseline pass rate {s.baseline_rate:.2f}"
                + (f" ({s.baseline_trials} trials)" if s.baseline_trials else "")
                + f"; unchanged: {trials(same)} trials per version to deploy (P {same.p_pass:.2f})")
        if drop is not None:
            line += f"; dropped by {p.delta}: {trials(drop)} to block (P {drop.p_fail:.2f})"
        least = "at least " if same.p_open > 0.1 else ""
        if s.cost_per_trial is not None:
            line += f"; {least}${s.cost_per_trial * same.expected_n:.2f} per version for an unchanged one"
        elif s.tokens_per_trial:
            line += f"; {least}{s.tokens_per_trial * same.expected_n:,.0f} tokens per version for an unchanged one"
        click.echo(line)
    if json_path:
        try:
            Path(json_path).write_text(json.dumps(p.as_dict(), indent=2), encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot write {json_path}: {e}") from None


@click.command()
@click.argument("path", default="assay.yaml", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(path, force):
    """Write a commented starter gate configuration to PATH (default assay.yaml)."""
    from ..gate import STARTER_CONFIG

    p = Path(path)
    if p.exists() and not force:
        raise UsageError(f"{p} exists; pass --force to overwrite it")
    try:
        p.write_text(STARTER_CONFIG, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write {p}: {e}") from None
    click.echo(f"wrote {p}; use it with: otel-assay gate LAKE --config {shlex.quote(str(p))}")


@click.command()
@click.option("--dir", "out_dir", default="assay-demo", show_default=True, type=click.Path(file_okay=False),
              help="Where the demo writes its lake and reports (recreated on each run).")
@click.option("--trials", type=click.IntRange(min=5, max=2000), default=60, show_default=True,
              help="Trials per scenario and version.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the scripted models.")
def demo(out_dir, trials, seed):
    """Run the example LangGraph agent offline, then the gate: the first thing to try.

    A baseline (v1) and a regressed candidate (v2) run every scenario with a scripted
    model into DIR/lake; the gate compares them and writes its reports to DIR. Needs
    the langgraph extra: pip install 'otel-assay[langgraph]'. Exits 0 when the demo ran.
    """
    from ..demo import run_demo
    from ..report.terminal import render

    result = run_demo(out_dir, trials=trials, seed=seed, log=lambda m: click.echo(m, err=True))
    render(result.gate, exit_with_decision=False)  # the demo exits 0 whatever the gate decided
    click.echo("")
    click.echo(f"In CI this gate would exit {result.gate.exit_code} ({result.gate.decision}).")
    click.echo(f"Reports: {result.html}  {result.json}  {result.junit}")
    click.echo(f"Try: otel-assay gate {shlex.quote(str(result.lake))} --baseline version=v1 --candidate version=v2 "
               "--html report.html")


def register(group: click.Group) -> None:
    for command in (gate, regress, verdict, report, plan_command, init, demo):
        group.add_command(command)
