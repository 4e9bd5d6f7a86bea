"""CLI commands over the analysis views (steps, trials, fingerprint, coverage, stability)."""

from __future__ import annotations

import click


def register(cli: click.Group) -> None:
    """Add the analysis commands to the ``otel-assay`` group."""
