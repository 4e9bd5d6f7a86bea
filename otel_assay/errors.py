"""The two expected-error kinds and their exit codes, and Ctrl-C.

Library code raises these; the command line prints the message (never a traceback) and
exits with the error's code. They do not depend on click, so that no library module needs
the command line's framework.
"""

from __future__ import annotations

EXIT_DEPLOY = 0
EXIT_BLOCK = 1
EXIT_MANUAL = 2
EXIT_USAGE = 3
EXIT_DATA = 4


class AssayError(Exception):
    """An expected error: ``message`` says what was wrong and what to do; ``exit_code`` is the
    command's exit code."""

    exit_code = EXIT_DATA

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def format_message(self) -> str:
        return self.message


class UsageError(AssayError):
    """A bad flag, value, selector or configuration: exit 3. The message says what to change."""

    exit_code = EXIT_USAGE


class DataError(AssayError):
    """No matching trials, unreadable, corrupt or missing data: exit 4. The message says what was found."""

    exit_code = EXIT_DATA


def is_utf8(text: str) -> bool:
    """Whether ``text`` is valid UTF-8. A path or argument with bytes that are not reaches
    Python as lone surrogates, which DuckDB cannot take: it raised deep inside a query,
    reported as a traceback or as a broken lake."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def interrupted(e: BaseException) -> bool:
    """Whether ``e`` is Ctrl-C: DuckDB stops a query on SIGINT and raises
    ``RuntimeError('Query interrupted')`` instead of KeyboardInterrupt (and
    InterruptException for Connection.interrupt()). Reported as a bug with its traceback,
    exit 4, it read as a broken lake; it is exit 130 like any interrupted command."""
    # imported here: every command imports this module at start-up (`--help` too), and
    # duckdb costs 0.16 s
    import duckdb

    return isinstance(e, (KeyboardInterrupt, duckdb.InterruptException)) or (
        type(e) is RuntimeError and str(e) == "Query interrupted")
