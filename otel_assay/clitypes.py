"""Parameter types shared by the CLI modules."""

from __future__ import annotations

import math

import click


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


# a probability or a share strictly between 0 and 1 (alpha, delta, a threshold)
UNIT = FiniteFloatRange(0, 1, min_open=True, max_open=True)
