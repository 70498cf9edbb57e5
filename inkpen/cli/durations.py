"""Durations on the command line: ``90``, ``90s``, ``15m``, ``2h``, ``7d``, ``1h30m``, ``never``.

Parts may be separated by spaces (``1h 30m``), so every span the command prints
(:func:`inkpen.cli.render.span`) can be given back to it. Kept by hand rather than taken from
pytimeparse2: that returns None for bad input (the message here says what to write), accepts
forms the rest of the command never prints, and is slower to import and to call
(docs/performance.md, 'Hand-written where a library could serve').
"""

from __future__ import annotations

import math
import re
from typing import Any

import click

from inkpen.checks import MAX_SECONDS

_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd])")
_NEVER = "never"


def parse_duration(given: str) -> float:
    """Seconds in ``given``: a number of seconds, or parts such as ``1d``, ``2h``, ``1h30m``."""
    value = given.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ValueError(f"{given!r} is not a duration; write a finite number of seconds")
        return seconds
    position, total = 0, 0.0
    for match in _PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if not value or position != len(value):
        raise ValueError(
            f"{given!r} is not a duration; write seconds (90) or parts with units s, m, h, d "
            "(90s, 15m, 2h, 7d, 1h30m, 1h 30m)"
        )
    return total


class Duration(click.ParamType[float | None, Any]):
    """A click parameter of seconds; ``never`` gives None when ``allow_never`` is set."""

    name = "duration"

    def __init__(
        self, *, allow_never: bool = False, minimum: float = 0.0, maximum: float = MAX_SECONDS
    ) -> None:
        self.allow_never = allow_never
        self.minimum = minimum
        self.maximum = maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, int | float):
            return value
        if self.allow_never and str(value).strip().lower() == _NEVER:
            return None
        try:
            seconds = parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if seconds < self.minimum or (self.minimum == 0 and seconds < 0):
            self.fail(f"{value!r} is shorter than the minimum of {self.minimum:g}s", param, ctx)
        if not seconds <= self.maximum:
            self.fail(
                f"{value!r} is longer than the maximum of {self.maximum:.0f}s "
                f"({self.maximum / 86400:.0f} days)",
                param,
                ctx,
            )
        return seconds

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DURATION|never" if self.allow_never else "DURATION"
