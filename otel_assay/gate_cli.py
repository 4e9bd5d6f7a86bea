"""CLI commands of the gate layer (gate, verdict, regress, report, init)."""

from __future__ import annotations

import click


def register(cli: click.Group) -> None:
    """Add the gate commands to the ``otel-assay`` group."""
