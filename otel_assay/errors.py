"""The CLI's two expected-error kinds and their exit codes (DESIGN §8)."""

from __future__ import annotations

import click

EXIT_DEPLOY = 0
EXIT_BLOCK = 1
EXIT_MANUAL = 2
EXIT_USAGE = 3
EXIT_DATA = 4


class UsageError(click.ClickException):
    """A bad flag, value, selector or configuration: exit 3. The message says what to change."""

    exit_code = EXIT_USAGE


class DataError(click.ClickException):
    """No matching trials, unreadable, corrupt or missing data: exit 4. The message says what was found."""

    exit_code = EXIT_DATA
