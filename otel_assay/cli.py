"""The ``otel-assay`` command line: each command is a thin click shell over a library function."""

from __future__ import annotations

import sys

import click

from . import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="otel-assay")
def cli() -> None:
    """otel-assay: did this change make my agent worse?

    Capture agent steps as OpenTelemetry spans, keep them in a Parquet span lake, and
    judge versions with statistics that hold up. Exit codes: 0 deploy/PASS, 1 block/FAIL,
    2 manual/INCONCLUSIVE, 3 usage or configuration error, 4 data error.
    """


def main() -> None:
    try:
        cli.main(prog_name="otel-assay", standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)


def _register_commands() -> None:
    from .analyze import commands as analyze_commands

    analyze_commands.register(cli)


_register_commands()
