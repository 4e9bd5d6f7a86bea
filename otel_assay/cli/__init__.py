"""The ``otel-assay`` command line: each command is a thin click shell over a library function.

Exit codes: 0 deploy/PASS, 1 block/FAIL, 2 manual/INCONCLUSIVE, 3 usage or configuration
error, 4 data error. Expected errors print one message saying what was wrong and what to
do, never a traceback.

This is the only package that imports click. The command modules import nothing heavy at
start-up: each command imports the library it runs (duckdb, pyarrow, numpy, scipy, rich,
the frameworks) when it runs, so that ``otel-assay --help`` and a usage error answer at
once instead of after most of a second of imports.
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..errors import EXIT_DATA, EXIT_USAGE, AssayError, interrupted
from . import analyze, gate, lake, live, oracles

CORRUPT_HINT = ("if a Parquet file is corrupt, `otel-assay compact --dir LAKE` names the unreadable files "
                "(and merges the rest); move them out of the lake or restore them")


class _Failed(click.ClickException):
    """A library error (UsageError, DataError) as click reports it: "Error: MESSAGE" on stderr
    and the error's exit code, under ``main`` and under click's own test runner alike."""

    def __init__(self, error: AssayError):
        super().__init__(error.message)
        self.exit_code = error.exit_code


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except AssayError as e:
            raise _Failed(e) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="otel-assay")
def cli() -> None:
    """otel-assay: did this change make my agent worse?

    Capture agent steps as OpenTelemetry spans, keep them in a Parquet span lake, and
    judge versions with statistics that hold up.

    Exit codes: 0 deploy/PASS, 1 block/FAIL, 2 manual/INCONCLUSIVE, 3 usage or
    configuration error, 4 data error.
    """


for _module in (lake, analyze, gate, oracles, live):
    _module.register(cli)


def main(argv: list[str] | None = None) -> None:
    """Entry point: click with usage errors mapped to exit 3 (click's own default is 2)."""
    try:
        rv = cli.main(args=argv, prog_name="otel-assay", standalone_mode=False)
    except click.exceptions.UsageError as e:  # includes BadParameter, NoSuchOption
        e.show()
        sys.exit(EXIT_USAGE)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:
        if interrupted(e):
            sys.exit(130)
        # whatever escaped the commands must not exit 1, which CI reads as "block"
        sys.exit(_unexpected(e))
    sys.exit(rv if isinstance(rv, int) else 0)


def _unexpected(e: Exception) -> int:
    """Report an error no command handled and return exit 4: the lake could not be judged."""
    import duckdb  # here: only an error that escaped every command needs it

    first = (str(e).splitlines() or [""])[0][:500]
    if isinstance(e, duckdb.OutOfMemoryException):
        click.echo(f"otel-assay: out of memory while analysing the lake: {first}\n"
                   "give it more memory with OTEL_ASSAY_MEMORY_LIMIT (the gate's default is 1.5GB), or analyse fewer trials",
                   err=True)
    elif isinstance(e, duckdb.Error):
        # a file that passed the open-time check but is corrupt inside, a file removed mid-run, ...
        click.echo(f"otel-assay: reading the lake failed: {type(e).__name__}: {first}\n{CORRUPT_HINT}", err=True)
    elif isinstance(e, OSError):
        click.echo(f"otel-assay: {type(e).__name__}: {first}\ncheck that the path exists and that you may read "
                   "and write it", err=True)
    else:
        import traceback

        traceback.print_exception(e)
        click.echo(f"otel-assay: internal error: {type(e).__name__}: {first}\n"
                   "this is a bug in otel-assay; please report it with the traceback above", err=True)
    return EXIT_DATA
