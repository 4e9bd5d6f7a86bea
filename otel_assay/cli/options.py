"""Parameter types and options shared by the commands."""

from __future__ import annotations

import math
from pathlib import Path

import click

from .. import settings
from ..report.files import remove_stale_reports


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange without NaN and infinity. FloatRange lets NaN through (every
    comparison with it is false), and a NaN threshold, timeout or size then failed deep in the
    statistics or the server with an internal error instead of exit 3."""

    name = "float"

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number{self._bounds()}.", param, ctx)
        return v

    def _bounds(self) -> str:
        return f" in the range {self._describe_range()}" if self.min is not None or self.max is not None else ""


# how every command's trial selector is written (every rule: analyze/select.py)
SELECTOR_HELP = "key=value[,key=value] (keys: version, scenario, run, model, outcome); repeat to AND, e.g. version=v2."

# a probability or a share strictly between 0 and 1 (alpha, delta, a threshold)
UNIT = FiniteFloatRange(0, 1, min_open=True, max_open=True)


def default_lake() -> str:
    return settings.lake_dir()


lake_option = click.option(
    "--dir", "lake_dir", default=default_lake, show_default="$OTEL_ASSAY_DIR or ./traces",
    type=click.Path(file_okay=False), help="The span lake directory.",
)


def _report_paths_in(args: list[str]) -> list[str]:
    """The --json/--junit/--html files named in a command line click could not parse (never
    a file that is also the --config)."""
    flags, found, config = ("--json", "--junit", "--html"), [], set()
    for i, a in enumerate(args):
        for flag in (*flags, "--config"):
            value = None
            if a == flag and i + 1 < len(args):
                value = args[i + 1]
            elif a.startswith(flag + "="):
                value = a[len(flag) + 1:]
            if value is not None and flag == "--config":
                config.add(value)
            elif value is not None:
                found.append(value)
    config = {Path(c).resolve() for c in config}
    return [f for f in found if f and not f.startswith("-") and Path(f).resolve() not in config]


class ReportsCommand(click.Command):
    """A command that writes reports: a command line that does not parse (exit 3: a flag
    misspelt, a value out of range) still removes the reports an earlier run left at the
    paths it names, as every other error does; CI would publish them as this run's."""

    def parse_args(self, ctx, args):
        given = list(args)  # click consumes ``args`` as it parses
        try:
            return super().parse_args(ctx, args)
        except click.UsageError:
            remove_stale_reports(*_report_paths_in(given))
            raise
