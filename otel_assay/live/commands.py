"""``otel-assay run`` (and the live display). Registered with :func:`register`."""

from __future__ import annotations

import json
import sys
import threading
import time

import click

from ..clitypes import FiniteFloatRange
from ..errors import UsageError
from ..report.output import printable


def _bar(llr: float, lower: float, upper: float, width: int = 15) -> str:
    """The SPRT statistic between its bounds: PASS bound on the left, FAIL bound on the right."""
    x = (llr - lower) / (upper - lower)
    pos = min(max(int(round(x * (width - 1))), 0), width - 1)
    cells = ["─"] * width
    cells[pos] = "●"
    return "PASS |" + "".join(cells) + "| FAIL"


def _row(s) -> list[str]:
    rate = f"{s.successes}/{s.n}" if s.n else "0/0"
    if s.method == "sprt" and s.lower is not None:
        stat = f"{_bar(s.llr, s.lower, s.upper)} {s.llr:+.2f}"
    else:
        stat = f"{s.n}/{s.target_n if s.target_n is not None else '?'} trials" + (
            f", variance {s.variance_class}" if s.variance_class else "")
    extra = []
    if s.resumed:
        extra.append(f"{s.resumed} resumed")
    if s.excluded:
        extra.append(f"{s.excluded} excluded")
    if s.retried:
        extra.append(f"{s.retried} retried")
    decision = s.decision if s.decision != "CONTINUE" else "running"
    return [s.scenario, s.method, rate, stat, decision, ", ".join(extra)]


class _Display:
    """A live table on stderr (a terminal), else one line per decided scenario."""

    def __init__(self, enabled: bool):
        self.tty = enabled and sys.stderr.isatty()
        self.enabled = enabled
        self.live = None
        self.printed: set[str] = set()
        self.lock = threading.Lock()
        self.last = 0.0

    def _table(self, runs):
        from rich.table import Table

        t = Table(title="otel-assay run", expand=False)
        for col in ("scenario", "method", "passed", "LLR between its bounds", "decision", "notes"):
            t.add_column(col)
        for s in runs:
            t.add_row(*_row(s))
        return t

    def __enter__(self):
        if self.tty:
            from rich.console import Console
            from rich.live import Live
            self.live = Live(console=Console(stderr=True), refresh_per_second=8, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)

    def __call__(self, runs) -> None:
        if not self.enabled:
            return
        with self.lock:
            if self.live is not None:
                now = time.monotonic()
                if now - self.last > 0.05 or all(s.done for s in runs):
                    self.live.update(self._table(runs))
                    self.last = now
                return
            for s in runs:
                if s.done and s.scenario not in self.printed:
                    self.printed.add(s.scenario)
                    click.echo(f"{s.scenario}: {s.decision} after {s.n} trials ({s.successes} passed; "
                               f"{s.stop_reason})", err=True)


def sigterm_interrupts() -> None:
    """SIGTERM (a cancelled CI job, `timeout`, a container stop) stops a run the way Ctrl-C
    does: finished trials are written at exit and a rerun resumes after them. Its default
    action kills the process with the spans still buffered."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


def render_result(result) -> None:
    from rich.console import Console
    from rich.table import Table

    from .runner import more_trials_text

    t = Table(title=f"{result.suite} @ {result.version}")
    for col in ("scenario", "decision", "passed", "interval", "trials run", "resumed", "excluded", "stop"):
        t.add_column(col)
    for s in result.scenarios:
        ci = f"[{s.ci_low:.2f}, {s.ci_high:.2f}]" if s.ci_low is not None else ""
        past = f", past {s.past_cap[0]}" if s.past_cap else ""
        stop = (s.stop_reason or "") + (f" (+{s.more_trials_needed} needed{past})" if s.more_trials_needed else "")
        t.add_row(printable(s.scenario), f"{s.decision} ({s.method})", f"{s.successes}/{s.n}", ci, str(s.ran), str(s.resumed),
                  str(s.excluded), stop)
    Console(width=None if sys.stdout.isatty() else 160, markup=False, emoji=False).print(t)
    click.echo(f"{result.decision}: {sum(s.ran for s in result.scenarios)} trials run in {result.elapsed_s:.1f}s"
               f", {result.tokens} tokens")
    for s in result.scenarios:
        if s.past_cap:
            click.echo(f"hint: {printable(s.scenario)}: {more_trials_text(s.more_trials_needed, s.n, s.config)} "
                       "in the scenario file's config, then run again", err=True)
    stops = {s.stop_reason for s in result.scenarios}
    if "empty-runs" in stops:
        click.echo("hint: no trial recorded an LLM call or a tool step, so none counts; instrument the agent "
                   "(import otel_assay.auto) or record its steps with otel_assay.step", err=True)
    if "timeouts" in stops:
        click.echo("hint: every trial timed out before any tool call, so none counts; raise --timeout "
                   "(or `timeout:` in the scenario file)", err=True)


def register(cli: click.Group) -> None:
    from ..gate_cli import ReportsCommand

    @cli.command("run", cls=ReportsCommand)
    @click.argument("scenarios_file", metavar="SCENARIOS.yaml", type=click.Path(dir_okay=False))
    @click.option("--agent", "agent_spec", default=None, metavar="MODULE:CALLABLE",
                  help="The agent: a callable (sync or async) taking the scenario input. Overrides `agent:` in the file.")
    @click.option("--version", "version", required=True, help="The agent version these trials belong to.")
    @click.option("--dir", "lake_dir", default=lambda: __import__("os").environ.get("OTEL_ASSAY_DIR", "traces"),
                  show_default="$OTEL_ASSAY_DIR or ./traces", type=click.Path(file_okay=False),
                  help="The span lake directory.")
    @click.option("--baseline", default=None, metavar="SEL",
                  help="Run the gate against this selection (e.g. version=v1) at the end; its decision is the exit code.")
    @click.option("--config", "gate_config", default=None, type=click.Path(dir_okay=False),
                  help="Gate config for --baseline (default: alpha, beta, delta, threshold from the scenario file).")
    @click.option("--concurrency", "-j", type=click.IntRange(min=1), default=None, help="Trials run at once.")
    @click.option("--timeout", type=FiniteFloatRange(min=0, min_open=True), default=None, help="Seconds per trial.")
    @click.option("--retries", type=click.IntRange(min=0), default=None, help="Retries of an infrastructure error.")
    @click.option("--t-max", type=FiniteFloatRange(min=0, min_open=True), default=None,
                  help="Wall-clock budget (seconds) for the whole run.")
    @click.option("--budget-tokens", type=click.IntRange(min=1), default=None, help="Token budget for the whole run.")
    @click.option("--budget-dollars", type=FiniteFloatRange(min=0, min_open=True), default=None,
                  help="Dollar budget for the whole run (LLM calls priced by the model_prices table or $OTEL_ASSAY_PRICES).")
    @click.option("--method", type=click.Choice(["fixed", "sprt", "adaptive"]), default=None,
                  help="Override every scenario's method.")
    @click.option("--scenario", "only", multiple=True, help="Run only this scenario (repeatable).")
    @click.option("--no-resume", is_flag=True, help="Do not reuse trials of this version already in the lake.")
    @click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False), help="Write the run as JSON.")
    @click.option("--quiet", "-q", is_flag=True, help="No live display; print only the decision line.")
    @click.pass_context
    def run(ctx, scenarios_file, agent_spec, version, lake_dir, baseline, gate_config, concurrency, timeout, retries,
            t_max, budget_tokens, budget_dollars, method, only, no_resume, json_path, quiet):
        """Run the agent on every scenario of SCENARIOS.yaml, as few trials as the statistics allow.

        Each trial is a trace in the lake (--dir). SPRT scenarios stop at the first boundary
        crossing; infrastructure errors are retried and excluded; rerunning the same --version
        resumes from the trials already in the lake. Exit 0 PASS, 1 FAIL, 2 INCONCLUSIVE (or the
        gate's decision with --baseline), 3 usage error, 4 data error.
        """
        from .runner import run_suite
        from .scenarios import import_object, load_scenarios

        suite = load_scenarios(scenarios_file)
        spec = agent_spec or suite.agent
        if not spec:
            raise UsageError("no agent: pass --agent module:callable or set `agent:` in the scenario file")
        agent = import_object(spec, "--agent")
        gcfg = None
        if gate_config:
            from ..gate import load_config
            from ..oracles.contracts import ContractError, check_sql
            gcfg = load_config(gate_config)
            try:
                check_sql(gcfg.contracts)
            except ContractError as e:
                raise UsageError(f"{gcfg.source}: {e}") from None
        from ..gate_cli import check_output_paths, remove_stale_reports
        check_output_paths(json=json_path)  # before the trials are paid for, not after
        remove_stale_reports(json_path)
        sigterm_interrupts()
        display = _Display(enabled=not quiet)
        with display:
            result = run_suite(suite, agent, version=version, lake=lake_dir, concurrency=concurrency, timeout=timeout,
                               retries=retries, t_max=t_max, budget_tokens=budget_tokens,
                               budget_dollars=budget_dollars, resume=not no_resume,
                               scenarios=list(only) or None, method=method, progress=display,
                               baseline=baseline or suite.baseline, gate_config=gcfg)
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
            try:
                with open(json_path, "w", encoding="utf-8") as f:
                    json.dump(result.as_dict(), f, indent=2, default=str)
            except OSError as e:
                raise UsageError(f"cannot write {json_path}: {e.strerror}") from None
        ctx.exit(result.exit_code)

    try:
        from .mutation import register_mutate
    except ImportError:  # pragma: no cover
        return
    register_mutate(cli)
