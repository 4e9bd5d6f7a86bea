"""What a live run shows: the scenarios' progress while trials run (a live table on a
terminal, else one line per decided scenario on stderr), the run's result, and a mutation
testing report.
"""

from __future__ import annotations

import math
import sys
import threading
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ..text import printable
from .runner import more_trials_text


def _echo(message: str, err: bool = False) -> None:
    """One line to stdout (or stderr), flushed at once: a CI log shows it while trials run."""
    print(message, file=sys.stderr if err else sys.stdout, flush=True)


def bar(e_pass: float, e_fail: float, alpha: float, width: int = 15) -> str:
    """Where the scenario's two tests stand: each decides when its wealth reaches 1 / alpha;
    the dot is at the balance of their logs, the PASS decision at the left end, FAIL at the
    right."""
    thr = math.log(1.0 / alpha)
    x = 0.5 + (math.log(max(e_fail, 1e-300)) - math.log(max(e_pass, 1e-300))) / (2.0 * thr)
    pos = min(max(int(round(x * (width - 1))), 0), width - 1)
    cells = ["─"] * width
    cells[pos] = "●"
    return "PASS |" + "".join(cells) + "| FAIL"


def row(s) -> list[str]:
    rate = f"{s.successes}/{s.n}" if s.n else "0/0"
    if s.method == "sprt":
        stat = f"{bar(s.e_pass, s.e_fail, s.config.alpha)} {max(s.e_pass, s.e_fail):.1f}/{1 / s.config.alpha:.0f}"
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


class Display:
    """A live table on stderr (a terminal), else one line per decided scenario."""

    def __init__(self, enabled: bool):
        self.tty = enabled and sys.stderr.isatty()
        self.enabled = enabled
        self.live = None
        self.printed: set[str] = set()
        self.lock = threading.Lock()
        self.last = 0.0

    def _table(self, runs):
        t = Table(title="otel-assay run", expand=False)
        for col in ("scenario", "method", "passed", "LLR between its bounds", "decision", "notes"):
            t.add_column(col)
        for s in runs:
            t.add_row(*row(s))
        return t

    def __enter__(self):
        if self.tty:
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
                    _echo(f"{s.scenario}: {s.decision} after {s.n} trials ({s.successes} passed; "
                          f"{s.stop_reason})", err=True)


def render_result(result) -> None:
    """The run's table of scenarios on stdout, its summary line, and hints on stderr."""
    t = Table(title=f"{result.suite} @ {result.version}")
    for col in ("scenario", "decision", "passed", "interval", "trials run", "resumed", "excluded", "stop"):
        t.add_column(col)
    for s in result.scenarios:
        ci = f"[{s.ci_low:.2f}, {s.ci_high:.2f}]" if s.ci_low is not None else ""
        past = f", past {s.past_cap[0]}" if s.past_cap else ""
        stop = (s.stop_reason or "") + (f" (+{s.more_trials_needed} needed{past})" if s.more_trials_needed else "")
        t.add_row(printable(s.scenario), f"{s.decision} ({s.method})", f"{s.successes}/{s.n}", ci, str(s.ran), str(s.resumed),
                  str(s.excluded), stop)
    console = Console(width=None if sys.stdout.isatty() else 160, markup=False, emoji=False)
    console.print(t)
    ran = sum(s.ran for s in result.scenarios)
    if result.baseline_version is not None:
        b = Table(title=f"baseline @ {result.baseline_version}, run alongside")
        for col in ("scenario", "passed", "interval", "trials run", "resumed", "excluded"):
            b.add_column(col)
        for s in result.baseline_scenarios:
            ci = f"[{s.ci_low:.2f}, {s.ci_high:.2f}]" if s.ci_low is not None else ""
            b.add_row(printable(s.scenario), f"{s.successes}/{s.n}", ci, str(s.ran), str(s.resumed), str(s.excluded))
        console.print(b)
        ran += sum(s.ran for s in result.baseline_scenarios)
    _echo(f"{result.decision}: {ran} trials run in {result.elapsed_s:.1f}s, {result.tokens} tokens")
    for s in result.scenarios:
        if s.past_cap:
            _echo(f"hint: {printable(s.scenario)}: {more_trials_text(s.more_trials_needed, s.n, s.config)} "
                       "in the scenario file's config, then run again", err=True)
    stops = {s.stop_reason for s in result.scenarios}
    if "empty-runs" in stops:
        _echo("hint: no trial recorded an LLM call or a tool step, so none counts; instrument the agent "
                   "(import otel_assay.auto) or record its steps with otel_assay.step", err=True)
    if "baseline empty-runs" in stops:
        _echo("hint: no trial of the baseline agent (--baseline-agent) recorded an LLM call or a tool step, so "
              "none pairs; instrument it (import otel_assay.auto) or record its steps with otel_assay.step", err=True)
    if "baseline" in stops:
        _echo("hint: the baseline has no more trials to pair with, so the regression test cannot go on; run "
              "the baseline version on more trials (its run resumes), then this one again", err=True)
    if "timeouts" in stops:
        _echo("hint: every trial timed out before any tool call, so none counts; raise --timeout "
                   "(or `timeout:` in the scenario file)", err=True)
    if "baseline timeouts" in stops:
        _echo("hint: every trial of the baseline agent (--baseline-agent) timed out before any tool call, so "
              "none pairs; raise --timeout (or `timeout:` in the scenario file)", err=True)


def render_mutation(rep) -> None:
    """The mutants' table and the mutation score on stdout."""
    t = Table(title="mutation testing")
    for col in ("mutant", "class", "change", "status", "trials", "why"):
        t.add_column(col)
    for r in rep.results:
        t.add_row(r.mutant.id, r.mutant.cls, r.mutant.description, r.status, str(r.trials), r.reason)
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    Console(markup=False, emoji=False).print(t)
    _echo(f"mutation score {fmt(rep.score)} ({rep.counts()}); per class: "
          + ", ".join(f"{c} {fmt(v)}" for c, v in rep.per_class.items()) + f"; {rep.trials} trials")
