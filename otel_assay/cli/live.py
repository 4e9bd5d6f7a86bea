"""The live commands: run (trials of an agent, as few as the statistics allow) and mutate
(mutation testing of the agent's config).

Each is a thin shell over :mod:`otel_assay.live`, imported when the command runs (start-up
time: see the package).
"""

from __future__ import annotations

import json
import signal
import threading

import click

from ..errors import UsageError
from ..live.mutation import CLASSES, OPERATORS
from ..report.files import check_output_paths, remove_stale_reports
from .options import UNIT, FiniteFloatRange, ReportsCommand, default_lake, lake_option


def sigterm_interrupts() -> None:
    """SIGTERM (a cancelled CI job, `timeout`, a container stop) stops a run the way Ctrl-C
    does: finished trials are written at exit and a rerun resumes after them. Its default
    action kills the process with the spans still buffered."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


@click.command("run", cls=ReportsCommand)
@click.argument("scenarios_file", metavar="SCENARIOS.yaml", type=click.Path(dir_okay=False))
@click.option("--agent", "agent_spec", default=None, metavar="MODULE:CALLABLE",
              help="The agent: a callable (sync or async) taking the scenario input. Overrides `agent:` in the file.")
@click.option("--version", "version", required=True, help="The agent version these trials belong to.")
@lake_option
@click.option("--baseline", default=None, metavar="SEL",
              help="Run the gate against this selection (e.g. version=v1) at the end; its decision is the exit code.")
@click.option("--baseline-agent", "baseline_agent_spec", default=None, metavar="MODULE:CALLABLE",
              help="Run this agent too, as --baseline-version, trial by trial alongside the candidate, and gate "
                   "against those trials at the end (instead of --baseline).")
@click.option("--baseline-version", default=None, help="The version the --baseline-agent's trials belong to.")
@click.option("--config", "gate_config", default=None, type=click.Path(dir_okay=False),
              help="Gate config for --baseline (default: alpha, beta, delta, threshold from the scenario file).")
@click.option("--concurrency", "-j", type=click.IntRange(min=1), default=None, help="Trials run at once.")
@click.option("--timeout", type=FiniteFloatRange(min=0, min_open=True), default=None, help="Seconds per trial.")
@click.option("--retries", type=click.IntRange(min=0), default=None, help="Retries of an infrastructure error.")
@click.option("--t-max", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Wall-clock budget (seconds) for the whole run.")
@click.option("--budget-tokens", type=click.IntRange(min=1), default=None, help="Token budget for the whole run.")
@click.option("--budget-dollars", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Dollar budget for the whole run (prices: $OTEL_ASSAY_PRICES or the shipped table).")
@click.option("--method", type=click.Choice(["fixed", "sprt", "adaptive"]), default=None,
              help="Override every scenario's method.")
@click.option("--scenario", "only", multiple=True, help="Run only this scenario (repeatable).")
@click.option("--no-resume", is_flag=True, help="Do not reuse trials of this version already in the lake.")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False), help="Write the run as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No live display; print only the decision line.")
@click.pass_context
def run(ctx, scenarios_file, agent_spec, version, lake_dir, baseline, baseline_agent_spec, baseline_version,
        gate_config, concurrency, timeout, retries, t_max, budget_tokens, budget_dollars, method, only, no_resume,
        json_path, quiet):
    """Run the agent on every scenario of SCENARIOS.yaml, as few trials as the statistics allow.

    Each trial is a trace in the lake (--dir). SPRT scenarios stop at their test's first
    decision (against the baseline with --baseline or --baseline-agent); infrastructure errors
    are retried and excluded; rerunning the same --version resumes from the trials already in
    the lake. With --baseline-agent and --baseline-version the baseline agent runs in the same
    job, each trial index of it next to the candidate's, so drift during the job hits both.
    Exit 0 PASS, 1 FAIL, 2 INCONCLUSIVE (or the gate's decision with a baseline), 3 usage
    error, 4 data error.
    """
    from ..live.display import Display, render_result
    from ..live.runner import run_suite
    from ..live.scenarios import import_object, load_scenarios

    suite = load_scenarios(scenarios_file)
    spec = agent_spec or suite.agent
    if not spec:
        raise UsageError("no agent: pass --agent module:callable or set `agent:` in the scenario file")
    agent = import_object(spec, "--agent")
    baseline_agent = None
    if baseline_agent_spec or baseline_version:
        if baseline:
            raise UsageError("give either --baseline (trials already in the lake) or --baseline-agent with "
                             "--baseline-version (run the baseline alongside), not both")
        if not (baseline_agent_spec and baseline_version):
            raise UsageError("--baseline-agent and --baseline-version go together: the baseline's agent and the "
                             "version its trials are recorded as")
        baseline_agent = import_object(baseline_agent_spec, "--baseline-agent")
    else:
        baseline = baseline or suite.baseline  # the scenario file's stored baseline, unless run alongside
    gcfg = None
    if gate_config:
        from ..gate import load_config
        from ..oracles.contracts import ContractError, check_sql
        gcfg = load_config(gate_config)
        try:
            check_sql(gcfg.contracts)
        except ContractError as e:
            raise UsageError(f"{gcfg.source}: {e}") from None
    check_output_paths(json=json_path)  # before the trials are paid for, not after
    remove_stale_reports(json_path)
    sigterm_interrupts()
    display = Display(enabled=not quiet)
    with display:
        result = run_suite(suite, agent, version=version, lake=lake_dir, concurrency=concurrency, timeout=timeout,
                           retries=retries, t_max=t_max, budget_tokens=budget_tokens,
                           budget_dollars=budget_dollars, resume=not no_resume,
                           scenarios=list(only) or None, method=method, progress=display,
                           baseline=baseline, gate_config=gcfg, baseline_agent=baseline_agent,
                           baseline_version=baseline_version)
    from ..report.output import stdout_reader_may_leave
    with stdout_reader_may_leave():  # `run ... | head`: the decision stays the exit code, --json is written
        if quiet:
            click.echo(f"decision: {result.decision} (exit {result.exit_code})")
        else:
            render_result(result)
            if result.gate is not None:
                from ..report.terminal import render
                render(result.gate)
    if json_path:
        _write_json(json_path, result.as_dict())
    ctx.exit(result.exit_code)


@click.command("mutate", cls=ReportsCommand)
@click.argument("scenarios_file", metavar="SCENARIOS.yaml", type=click.Path(dir_okay=False))
@click.option("--factory", "factory_spec", required=True, metavar="MODULE:CALLABLE",
              help="make_agent(config) -> agent, called with an otel_assay.live.mutation.AgentConfig.")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="The agent config (YAML: prompt, tools, model, context, models, downgrades).")
@click.option("--dir", "lake_dir", default=default_lake, type=click.Path(file_okay=False),
              help="The span lake directory [default: $OTEL_ASSAY_DIR or traces].")
@click.option("--operators", default=None, metavar="A,B,...",
              help=f"Operators or classes to apply (default all): {', '.join(OPERATORS)}; {', '.join(CLASSES)}.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the mutant generator (which instructions, tools, examples are changed).")
@click.option("--per-operator", type=click.IntRange(min=1), default=1, show_default=True,
              help="Distinct mutants generated per operator.")
@click.option("--original-trials", type=click.IntRange(min=5), default=100, show_default=True,
              help="Counted trials of the unmutated agent per scenario: the pass rate mutants are compared with.")
@click.option("--n-max", type=click.IntRange(min=5), default=200, show_default=True,
              help="Most counted trials per mutant and scenario before the SPRT must stop.")
@click.option("--delta", type=UNIT, default=0.2, show_default=True,
              help="Pass-rate change (either way) that kills a mutant.")
@click.option("--alpha", type=UNIT, default=0.05, show_default=True,
              help="False-kill rate of each mutant's test.")
@click.option("--min-score", type=FiniteFloatRange(0, 1), default=None,
              help="Exit 1 when the mutation score is below this.")
@click.option("--version", default="mutation", show_default=True, help="Version label of the trials.")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the report (every mutant, its status and trials) as JSON.")
@click.pass_context
def mutate(ctx, scenarios_file, factory_spec, config_path, lake_dir, operators, seed, per_operator,
           original_trials, n_max, delta, alpha, min_score, version, json_path):
    """Mutation testing: mutate the agent config, run the scenarios on each mutant, and report
    which mutants the suite kills, overall and per operator class.

    Exit 0, or 1 when the mutation score is below --min-score; 3 usage error, 4 data error.
    """
    from ..live.display import render_mutation
    from ..live.mutation import AgentConfig, run_mutation
    from ..live.scenarios import import_object, load_scenarios
    from ..report.output import stdout_reader_may_leave

    check_output_paths(json=json_path)  # before the trials are paid for, not after
    remove_stale_reports(json_path)
    sigterm_interrupts()
    suite = load_scenarios(scenarios_file)
    factory = import_object(factory_spec, "--factory")
    cfg = AgentConfig.load(config_path)
    ops = [o.strip() for o in operators.split(",") if o.strip()] if operators is not None else None
    if ops == []:  # `--operators ,` or "": not "all of them" by accident
        raise UsageError(f"--operators {operators!r} names no operator; give one or more of "
                         f"{', '.join(OPERATORS)}, or leave the option out for all")
    rep = run_mutation(suite, factory, cfg, lake=lake_dir, version=version, operators=ops, seed=seed,
                       per_operator=per_operator, original_trials=original_trials, n_max=n_max, delta=delta,
                       alpha=alpha)
    with stdout_reader_may_leave():  # `mutate ... | head`: the exit code and --json stay the run's
        render_mutation(rep)
    if json_path:
        _write_json(json_path, rep.as_dict())
    ctx.exit(1 if (min_score is not None and (rep.score or 0.0) < min_score) else 0)


def _write_json(path: str, data) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, default=str)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from None


def register(group: click.Group) -> None:
    for command in (run, mutate):
        group.add_command(command)
