"""The gate's terminal report (rich): a summary table per scenario, the statistics behind
each check, coverage by dimension and the decision.

Laid out for 80 columns. On a terminal it uses colour and box lines; otherwise (a CI log,
a pipe) it prints the same content as plain text, without escape codes or box drawing.
"""

from __future__ import annotations

import io
import sys
from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..text import printable
from .output import family_text, feature_shift

STYLE = {"PASS": "green", "FAIL": "bold red", "INCONCLUSIVE": "yellow", "SKIPPED": "dim",
         "deploy": "bold green", "block": "bold red", "manual": "bold yellow"}
SHORT = {"PASS": "PASS", "FAIL": "FAIL", "INCONCLUSIVE": "INC", "SKIPPED": "skip"}
COLUMNS = (("pass_rate", "θ"), ("regression", "regr."), ("fingerprint", "T²"), ("stability", "stab."),
           ("contracts", "contr."), ("metamorphic", "meta."))


def _num(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _p(x) -> str:
    return "n/a" if x is None else f"{x:.2g}"


def _rate(arm) -> str:
    return "n/a" if arm is None or arm.rate is None else f"{arm.rate:.2f}"


def _verdict(v: str, gating: bool = True) -> Text:
    label = SHORT.get(v, v)
    return Text(label if gating else f"({label})", style=STYLE.get(v, ""))


def _detail(check) -> list[str]:
    s = check.stats
    if check.name == "pass_rate" and s:
        return [f"{s['successes']}/{s['n']} = {s['pass_rate']:.3f}, anytime bounds [{s['ci_low']:.3f}, "
                f"{s['ci_high']:.3f}] vs θ={s['threshold']}"]
    if check.name == "regression" and s:
        unused = [f"{s[f'unused_{arm}']} {arm} unused" for arm in ("baseline", "candidate") if s[f"unused_{arm}"]]
        return [f"drop {s['drop']:+.3f}, anytime bounds [{s['drop_lower']:.3f}, {s['drop_upper']:.3f}], "
                f"p={_p(s['pvalue'])} (adj {_p(s['pvalue_adjusted'])})" + (f"; {', '.join(unused)}" if unused else "")]
    if check.name == "fingerprint" and s:
        # an infinite T² is no size: the arms do not overlap at all along the shift
        t2 = ("T² unbounded: the arms separate completely (no spread within them along the shift)"
              if s["t2"] is None else f"T²={s['t2']:.1f}")
        crit = "" if s.get("t2_critical") is None else f" (crit {s['t2_critical']:.1f})"
        lines = [f"p={_p(s['pvalue'])} (adj {_p(s['pvalue_adjusted'])})"]
        if "e_value" in s:
            # the anytime test over every pair so far, and T² on the first pairs only
            lines[-1] += (f"; anytime e={s['e_value']:.3g} over {s['n_pairs']} pairs ({s['pairing']})"
                          + (f", FAIL at {s['fail_at']}" if s.get("fail_at") else ""))
            lines.append(f"first {s['t2_pairs']} pairs: {t2}{crit}, p={_p(s['pvalue_t2'])}"
                         + ("" if s["t2_counts"] else " (not yet counted)"))
        else:
            lines[-1] = f"{t2}{crit}, " + lines[-1]
        lines[-1] += f", d_eff={s['d_eff']}, {s['method']}"
        if s.get("min_detectable_shift") is not None:
            lines[-1] += f", min shift {s['min_detectable_shift']:.2f} SD"
        moved = [f"{f['name']} {feature_shift(f)}"
                 for f in s.get("top_features", [])[:3] if f["smd"] != 0]
        if moved:
            lines.append("moved: " + ", ".join(moved))
        return lines
    if check.name == "stability" and s:
        flags = ", ".join(s["candidate_flags"]) or "none"
        return [f"score {_num(s['candidate_score'], 2)} (baseline {_num(s['baseline_score'], 2)}), flags: {flags}"]
    return []


def render(result, out: TextIO | None = None, *, width: int | None = None, color: bool | None = None,
           exit_with_decision: bool = True) -> None:
    """Print the report of a :class:`~otel_assay.gate.GateResult` to ``out`` (stdout).
    ``exit_with_decision`` False: the command exits 0 whatever the decision (``report``), so
    the decision line gives the code the gate would exit with, not one this process exits with."""
    out = out or sys.stdout
    tty = out.isatty() if color is None else color
    target = out if tty else io.StringIO()
    console = Console(file=target, width=width or (None if tty else 80), force_terminal=tty,
                      color_system="auto" if tty else None, highlight=False, soft_wrap=False,
                      markup=False, emoji=False)  # scenario and tool names are data, not markup
    _render(result, console, tty, exit_with_decision)
    if not tty:  # rich pads cells with spaces; a log reads better without them
        out.write("".join(line.rstrip() + "\n" for line in target.getvalue().splitlines()))


def _render(result, console: Console, tty: bool, exit_with_decision: bool = True) -> None:
    cfg = result.config
    c = result.candidate
    console.print(Text(f"otel-assay {result.mode}", style="bold"))
    b = result.baseline
    # which instrumentation recorded each arm, when they differ (a note says what that means)
    differ = b is not None and b.get("conventions") != c.get("conventions")
    console.print(f"  candidate {printable(c['selection'])}: {c['trials']} trials in {printable(c['lake'])}"
                  + (f", recorded by {', '.join(c['conventions']) or 'none'}" if differ else ""))
    if b:
        console.print(f"  baseline  {printable(b['selection'])}: {b['trials']} trials in {printable(b['lake'])}"
                      + (f", recorded by {', '.join(b['conventions']) or 'none'}" if differ else ""))
    theta = "off" if cfg.threshold is None else cfg.threshold
    console.print(f"α={cfg.alpha} β={cfg.beta} δ={cfg.delta} θ={theta} {family_text(result)}"
                  f" config={cfg.source}", style="dim")

    table = Table(box=box.SIMPLE_HEAD if tty else None, pad_edge=False, show_edge=False, padding=(0, 1),
                  header_style="bold" if tty else "")
    table.add_column("scenario", overflow="fold", max_width=20)
    table.add_column("n b/c" if result.baseline else "n", justify="right", no_wrap=True)
    table.add_column("pass b→c" if result.baseline else "pass", justify="right", no_wrap=True)
    table.add_column("95% CI" if abs(cfg.alpha - 0.05) < 1e-12 else f"{1 - cfg.alpha:.0%} CI", no_wrap=True)
    present = [(name, head) for name, head in COLUMNS if any(r.check(name) for r in result.scenarios)]
    for _, head in present:
        table.add_column(head, no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for r in result.scenarios:
        b, k = r.baseline, r.candidate
        n = f"{b.trials}/{k.trials}" if b else str(k.trials)
        rate = f"{_rate(b)}→{_rate(k)}" if b else _rate(k)
        ci = "n/a" if k.ci_low is None else f"{k.ci_low:.2f}-{k.ci_high:.2f}"
        cells = []
        for name, _ in present:
            ch = r.check(name)
            cells.append(_verdict(ch.verdict, ch.gating) if ch else Text("-", style="dim"))
        table.add_row(printable(r.scenario), n, rate, ci, *cells, _verdict(r.verdict))
    console.print(table)
    console.print("INC = inconclusive; (…) = reported, not part of the decision", style="dim" if tty else "")
    if any(r.verdict == "SKIPPED" for r in result.scenarios):
        console.print("verdict skip = no check gates the scenario: not part of the decision",
                      style="dim" if tty else "")

    for r in result.scenarios:
        console.print(Text(printable(r.scenario), style="bold"))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=1)
        grid.add_column(width=11, no_wrap=True)
        grid.add_column(width=6, no_wrap=True)
        grid.add_column(ratio=1)
        for ch in r.checks:
            body = Text(printable(ch.reason))
            for line in _detail(ch):
                body.append("\n" + printable(line), style="dim" if tty else "")
            grid.add_row("", ch.name, _verdict(ch.verdict, ch.gating), body)
        console.print(grid)

    if result.coverage:
        cov = result.coverage
        dims = "  ".join(f"{d['name']} {'n/a' if d['value'] is None else format(d['value'], '.2f')}"
                         for d in cov["dimensions"])
        overall = "n/a" if cov["overall"] is None else f"{cov['overall']:.2f}"
        minimum = "" if cov["minimum"] is None else f" (min {cov['minimum']})"
        console.print(Text("coverage", style="bold"), f"(candidate) overall {overall}{minimum}: {dims}")
        zero = [d["name"] for d in cov["dimensions"] if d["value"] == 0]
        if zero and cov["overall"] == 0:
            # the geometric mean (coverage doc): one untested dimension zeroes the whole
            console.print(f"  overall is the geometric mean of the dimensions: 0 because {', '.join(zero)} "
                          "coverage is 0", style="dim" if tty else "")
        if cov["verdict"] != "SKIPPED":
            line = Text("  ")
            line.append_text(_verdict(cov["verdict"]))
            line.append(f"  {printable(cov['reason'])}")
            console.print(line)
    for note in result.notes:
        console.print(f"note: {printable(note)}", style="dim" if tty else "")
    decision = Text("decision: ", style="bold")
    decision.append(result.decision.upper(), style=STYLE[result.decision])
    decision.append(f" (exit {result.exit_code})" if exit_with_decision
                    else f" (the gate would exit {result.exit_code})")
    console.print(decision)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=3)
    grid.add_column(ratio=1)
    for reason in result.reasons[:10]:
        grid.add_row("  -", printable(reason))
    if len(result.reasons) > 10:
        grid.add_row("", f"... and {len(result.reasons) - 10} more (see --json)")
    console.print(grid)
